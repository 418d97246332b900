package notify

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

// submit answers POST /notify/events: 201 with the new notification and its
// tasks, 200 with the existing one for a repeated (user_id, event_key) from
// the same service (another service's key is another event: NTF-I1).
func (h *handlers) submit(c echo.Context) error {
	var req EventRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	data, err := validateEvent(req)
	if err != nil {
		return err
	}
	by := httpx.PrincipalOf(c).Subject
	return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		n, created, err := h.svc.Submit(ctx, tx, req, data, by)
		if err != nil {
			return 0, nil, err
		}
		if created {
			return http.StatusCreated, n, nil
		}
		return http.StatusOK, n, nil
	})
}

// notification answers GET /notify/notifications/{id}.
func (h *handlers) notification(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	n, err := h.svc.Notification(c.Request().Context(), id, httpx.PrincipalOf(c))
	if err != nil {
		return err
	}
	httpx.NoStore(c) // personal data, like every personal read
	return c.JSON(http.StatusOK, n)
}

// putPreferences answers PUT /notify/users/{id}/preferences.
func (h *handlers) putPreferences(c echo.Context) error {
	user, err := userParam(c)
	if err != nil {
		return err
	}
	var req PreferencesRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	p, err := h.svc.PutPreferences(c.Request().Context(), user, req, httpx.PrincipalOf(c))
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, p)
}

// getPreferences answers GET /notify/users/{id}/preferences.
func (h *handlers) getPreferences(c echo.Context) error {
	user, err := userParam(c)
	if err != nil {
		return err
	}
	p, err := h.svc.Preferences(c.Request().Context(), user, httpx.PrincipalOf(c))
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, p)
}

// Review queue paging.
const (
	defaultReviewLimit = 50
	maxReviewLimit     = 500
)

// reviewQueue answers GET /notify/review?after=&limit=.
func (h *handlers) reviewQueue(c echo.Context) error {
	after, limit := int64(0), defaultReviewLimit
	if v := c.QueryParam("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return httpx.BadRequest("invalid_cursor", "after must be a task id from a previous page").With("field", "after")
		}
		after = n
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxReviewLimit {
			return httpx.BadRequest("invalid_limit", "limit must be 1..%d", maxReviewLimit).With("field", "limit")
		}
		limit = n
	}
	page, err := h.svc.ReviewQueue(c.Request().Context(), after, limit)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, page)
}

// resolve answers POST /notify/review/{task}/resolve with the task after
// the decision.
func (h *handlers) resolve(c echo.Context) error {
	taskID, err := pathID(c, "task")
	if err != nil {
		return err
	}
	var req ResolveRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	d, err := validateResolve(req)
	if err != nil {
		return err
	}
	who := httpx.PrincipalOf(c).Subject
	return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		t, err := h.svc.Resolve(ctx, tx, taskID, req, d, who)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, t, nil
	})
}

// loopbackFault arms a fault in an in-process fake channel (admin, dev).
func (h *handlers) loopbackFault(c echo.Context) error {
	var req loopbackFaultRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	armed, err := h.svc.injectLoopbackFault(c.Param("channel"), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"channel": c.Param("channel"), "armed": armed})
}

// pathID reads a numeric path id under the one rule (httpx.ParamID).
func pathID(c echo.Context, name string) (int64, error) { return httpx.ParamID(c, name) }

// userParam reads the {id} of /notify/users/{id}/…: a malformed user id
// is 400 invalid_id, like every malformed path id.
func userParam(c echo.Context) (string, error) {
	id := c.Param("id")
	if !httpx.ValidSubject(id) {
		return "", httpx.InvalidID("id", "a user id (1-128 characters of A-Z a-z 0-9 . _ : @ -)")
	}
	return id, nil
}
