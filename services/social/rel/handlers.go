package rel

import (
	"context"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

type handlers struct{ svc *Service }

// fresh answers v with 200 and Cache-Control: no-store, or err. Reads are
// decided on the truth table at the moment they run (AccessCheck,
// REL-I4); a cached answer could show what a block has since revoked.
func fresh(c echo.Context, v any, err error) error {
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, v)
}

// me is the caller's profile with counts.
func (h *handlers) me(c echo.Context) error {
	ctx, me := c.Request().Context(), httpx.PrincipalOf(c).Subject
	u, err := h.svc.profile(ctx, me)
	if err != nil {
		return err
	}
	counts, err := h.svc.countsOf(ctx, me, me)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, map[string]any{"user": u, "counts": counts})
}

func (h *handlers) setProfile(c echo.Context) error {
	var req ProfileRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	if req.Private == nil {
		return httpx.Invalid("missing_field", "field %q is required", "private").With("field", "private")
	}
	u, err := h.svc.SetProfile(c.Request().Context(), httpx.PrincipalOf(c).Subject, *req.Private)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, u)
}

// op runs one of the six relation operations as the token's subject on
// the user in the path. The routes take no body: a body (say, a
// "follower" field naming someone else) is refused, not ignored.
func (h *handlers) op(op Op) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := httpx.EmptyBody(c); err != nil {
			return err
		}
		res, err := h.svc.Do(c.Request().Context(), op, httpx.PrincipalOf(c).Subject, c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, res)
	}
}

func (h *handlers) relation(c echo.Context) error {
	mine, theirs, err := h.svc.Relations(c.Request().Context(), httpx.PrincipalOf(c).Subject, c.Param("id"))
	return fresh(c, map[string]Relation{"outgoing": mine, "incoming": theirs}, err)
}

func (h *handlers) requests(c echo.Context) error {
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	p, err := h.svc.requestsPage(c.Request().Context(), httpx.PrincipalOf(c).Subject, c.QueryParam("after"), limit)
	return fresh(c, p, err)
}

func (h *handlers) followers(c echo.Context) error { return h.list(c, h.svc.followersPage) }
func (h *handlers) following(c echo.Context) error { return h.list(c, h.svc.followingPage) }

func (h *handlers) list(c echo.Context, read func(ctx context.Context, viewer, owner, after string, limit int) (Page, error)) error {
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	p, err := read(c.Request().Context(), httpx.PrincipalOf(c).Subject, c.Param("id"), c.QueryParam("after"), limit)
	return fresh(c, p, err)
}

func (h *handlers) counts(c echo.Context) error {
	n, err := h.svc.countsOf(c.Request().Context(), httpx.PrincipalOf(c).Subject, c.Param("id"))
	return fresh(c, n, err)
}

func (h *handlers) timeline(c echo.Context) error {
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	p, err := h.svc.timelinePage(c.Request().Context(), httpx.PrincipalOf(c).Subject, c.Param("id"), c.QueryParam("cursor"), limit)
	return fresh(c, p, err)
}

// createPost publishes a post; an Idempotency-Key makes a retry return
// the first post instead of a second one.
func (h *handlers) createPost(c echo.Context) error {
	var req PostRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	author := httpx.PrincipalOf(c).Subject
	return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		p, err := h.svc.CreatePostTx(ctx, tx, author, req)
		if err != nil {
			return 0, nil, err
		}
		c.Response().Header().Set(echo.HeaderLocation, "/social/posts/"+strconv.FormatInt(p.PostID, 10))
		return http.StatusCreated, p, nil
	})
}

// readPost answers 200 when AccessCheck allows the read now, 403 when it
// refuses, 404 for no such post.
func (h *handlers) readPost(c echo.Context) error {
	id, err := postIDParam(c)
	if err != nil {
		return err
	}
	p, err := h.svc.readPost(c.Request().Context(), httpx.PrincipalOf(c).Subject, id)
	return fresh(c, p, err)
}

func (h *handlers) setVisibility(c echo.Context) error {
	id, err := postIDParam(c)
	if err != nil {
		return err
	}
	var req VisibilityRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	p, err := h.svc.SetVisibility(c.Request().Context(), httpx.PrincipalOf(c).Subject, id, req.Visibility)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

// views shows every derived view's lag against its declared bound.
func (h *handlers) views(c echo.Context) error {
	lags, err := h.svc.viewLags(c.Request().Context())
	return fresh(c, map[string]any{"views": lags}, err)
}

func limitParam(c echo.Context) (int, error) {
	s := c.QueryParam("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, errInvalidLimit
	}
	return n, nil
}

// postIDParam reads the post id under the one rule for path ids.
func postIDParam(c echo.Context) (int64, error) { return httpx.ParamID(c, "id") }
