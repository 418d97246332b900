package upload

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

type handlers struct {
	svc *Service
	cfg Config
}

func (h *handlers) createSession(c echo.Context) error {
	var req CreateSessionRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	sess, err := h.svc.CreateSession(c.Request().Context(), httpx.PrincipalOf(c).Subject, req)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/upload/sessions/"+sess.ID)
	return c.JSON(http.StatusCreated, sess)
}

func (h *handlers) getSession(c echo.Context) error {
	sess, err := h.svc.Session(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, sess)
}

// putChunk answers PUT /upload/sessions/{id}/chunks/{n}: 201 when this
// request stored the chunk, 200 when it was already stored with the same
// bytes. The body is streamed to the partial file; its size is bounded by
// the chunk's slot, its read time by ChunkTimeout.
func (h *handlers) putChunk(c echo.Context) error {
	n, err := strconv.Atoi(c.Param("n"))
	if err != nil {
		return httpx.BadRequest("invalid_chunk_index", "chunk index must be an integer, got %q", c.Param("n"))
	}
	sum, err := checksumOf(c.Request().Header)
	if err != nil {
		return err
	}
	// A stalled client must not hold the chunk's range lock forever.
	rc := http.NewResponseController(c.Response().Writer)
	if err := rc.SetReadDeadline(time.Now().Add(h.cfg.ChunkTimeout)); err == nil {
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	req := c.Request()
	res, err := h.svc.PutChunk(req.Context(), httpx.PrincipalOf(c), c.Param("id"), n, req.Body, req.ContentLength, sum)
	if errors.Is(err, errChunkInProgress) {
		p := *httpx.ProblemOf(c, err)
		p.RetryAfter = 1
		return &p
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res.Stored {
		status = http.StatusCreated
	}
	return c.JSON(status, res)
}

// checksumOf reads the chunk's optional SHA-256 from Content-Digest
// (RFC 9530: sha-256=:<base64>:) or Content-SHA256 (hex). Other digest
// algorithms are ignored; two headers that disagree are an error.
func checksumOf(hd http.Header) (checksum, error) {
	var sum checksum
	if v := hd.Get("Content-SHA256"); v != "" {
		b, err := hex.DecodeString(strings.TrimSpace(v))
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("%w: Content-SHA256 must be 64 hex digits", errChecksumHeader)
		}
		sum = b
	}
	for _, v := range hd.Values("Content-Digest") {
		for _, member := range strings.Split(v, ",") {
			alg, val, ok := strings.Cut(strings.TrimSpace(member), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(alg), "sha-256") {
				continue
			}
			val = strings.TrimSpace(val)
			if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
				return nil, fmt.Errorf("%w: Content-Digest sha-256 must be :<base64>:", errChecksumHeader)
			}
			b, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("%w: Content-Digest sha-256 must hold 32 bytes in base64", errChecksumHeader)
			}
			if sum != nil && string(sum) != string(b) {
				return nil, fmt.Errorf("%w: Content-Digest and Content-SHA256 disagree", errChecksumHeader)
			}
			sum = b
		}
	}
	return sum, nil
}

func (h *handlers) complete(c echo.Context) error {
	sess, err := h.svc.Complete(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"))
	var missing *missingChunksError
	if errors.As(err, &missing) {
		return httpx.ProblemOf(c, err).With("missing_chunks", missing.Missing).With("missing_count", missing.Total)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sess)
}

func (h *handlers) commit(c echo.Context) error {
	var req CommitRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	f, created, err := h.svc.Commit(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"), req)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/upload/files/"+f.ID)
	if created {
		return c.JSON(http.StatusCreated, f)
	}
	return c.JSON(http.StatusOK, f)
}

func (h *handlers) abort(c echo.Context) error {
	sess, err := h.svc.Abort(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sess)
}

func (h *handlers) fileInfo(c echo.Context) error {
	f, err := h.svc.File(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, f)
}

// read answers GET (and HEAD) /upload/files/{id}: the published bytes,
// streamed, with Range, conditional requests and ETag = "<sha256>"
// (http.ServeContent). A file not yet published is a 409 not_ready problem
// and never a byte of it (UP-F4).
func (h *handlers) read(c echo.Context) error {
	f, b, err := h.svc.Open(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	defer b.Close()
	hd := c.Response().Header()
	hd.Set(echo.HeaderContentType, f.ContentType)
	hd.Set("ETag", `"`+f.SHA256+`"`)
	hd.Set("Cache-Control", "private, max-age=0, must-revalidate")
	hd.Set("X-Content-Type-Options", "nosniff")
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": f.Name}); cd != "" {
		hd.Set(echo.HeaderContentDisposition, cd)
	}
	http.ServeContent(c.Response(), c.Request(), "", *f.PublishedAt, b)
	return nil
}

// gc answers POST /upload/gc (admin or service): run GC now.
func (h *handlers) gc(c echo.Context) error {
	r, err := h.svc.GC(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}
