package claim

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

func init() {
	httpx.MapError(ErrNotFound, http.StatusNotFound, "job_not_found")
	httpx.MapError(ErrNotInReview, http.StatusConflict, "not_in_review")
}

// MaxEventsShown bounds the history GET /jobs/{id} returns.
const MaxEventsShown = 1000

// JobView is the body of GET /jobs/{id}.
type JobView struct {
	Job             *Job    `json:"job"`
	Events          []Event `json:"events"`
	EventsTruncated bool    `json:"events_truncated,omitempty"`
}

// Routes mounts the admin view of a job and its history:
//
//	GET /jobs/{id}   admin or service
func (c *Client) Routes(e *echo.Echo, auth *httpx.Auth) {
	e.GET("/jobs/:id", c.getJob, auth.Require(httpx.RoleAdmin, httpx.RoleService))
}

func (c *Client) getJob(ec echo.Context) error {
	id, err := httpx.ParamID(ec, "id") // the one rule: 400 invalid_id
	if err != nil {
		return err
	}
	j, events, err := c.Get(ec.Request().Context(), id, MaxEventsShown+1)
	if err != nil {
		return err
	}
	v := JobView{Job: j, Events: events}
	if len(events) > MaxEventsShown {
		v.Events, v.EventsTruncated = events[:MaxEventsShown], true
	}
	if v.Events == nil {
		v.Events = []Event{}
	}
	return ec.JSON(http.StatusOK, v)
}
