package workflow

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

type handlers struct{ s *service }

// StartRequest is the body of POST /workflows.
type StartRequest struct {
	BusinessKey string          `json:"business_key"`
	Input       json.RawMessage `json:"input,omitempty"`
}

// StartResponse answers POST /workflows.
type StartResponse struct {
	JobID   int64  `json:"job_id"`
	Created bool   `json:"created"`
	Job     string `json:"job"`
}

var businessKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$`)

// maxInput bounds a workflow's input (the job payload).
const maxInput = 16 << 10

// start enqueues a workflow run: 202 for a new run, 200 when the business
// key already has one (the same job: enqueue is idempotent per key).
func (h *handlers) start(c echo.Context) error {
	var req StartRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	if !businessKeyRE.MatchString(req.BusinessKey) {
		return httpx.Invalid("invalid_business_key", "business_key must be 1-200 characters of [A-Za-z0-9._:-]").With("field", "business_key")
	}
	if len(req.Input) > maxInput {
		return httpx.Invalid("input_too_large", "input must be at most %d bytes", maxInput).With("field", "input")
	}
	id, created, err := h.s.start(c.Request().Context(), req.BusinessKey, req.Input)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusAccepted
	}
	return c.JSON(status, StartResponse{JobID: id, Created: created, Job: "/jobs/" + strconv.FormatInt(id, 10)})
}
