package ops

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
)

// EnvClaimRetention is how long finished jobs and their history are kept
// (default claim.DefaultRetention).
const EnvClaimRetention = "FENCELAB_CLAIM_RETENTION"

// Claim is chapter 2's engine as a module: its invariants, the admin view
// of a job (GET /jobs/{id}) and claim.purge, the periodic kind that
// drops the days of job_history (finished jobs and their job_event rows)
// older than FENCELAB_CLAIM_RETENTION, kinds registered with KeepFinished
// excepted (claim.Client.MaintainHistory, docs/DATA.md). The engine itself is Deps.Jobs, which app.Build makes
// and every module enqueues on.
func Claim() app.Module {
	return app.Module{
		Name: "claim", Chapter: "claim",
		Invariants: claim.Invariants,
		Errors: []httpx.ErrorMapping{
			httpx.Map(claim.ErrNotFound, http.StatusNotFound, "job_not_found"),
			httpx.Map(claim.ErrNotInReview, http.StatusConflict, "not_in_review"),
		},
		Build: func(d app.Deps) (app.Runtime, error) {
			retention := claim.DefaultRetention
			r := app.NewSettingsReader(d.Config, "claim")
			r.Duration(EnvClaimRetention, &retention, time.Hour, 366*24*time.Hour)
			if err := r.Err(); err != nil {
				return app.Runtime{}, err
			}
			rt := app.Runtime{Routes: func(e *echo.Echo) {
				e.GET("/jobs/:id", getJob(d.Jobs), d.Auth.Require(httpx.RoleAdmin, httpx.RoleService))
			}}
			if d.Jobs != nil {
				rt.Kinds = []claim.Kind{d.Jobs.PurgeKind(retention)}
			}
			return rt, nil
		},
	}
}

// MaxEventsShown bounds the history GET /jobs/{id} returns.
const MaxEventsShown = 1000

// JobView is the body of GET /jobs/{id}.
type JobView struct {
	Job             *claim.Job    `json:"job"`
	Events          []claim.Event `json:"events"`
	EventsTruncated bool          `json:"events_truncated,omitempty"`
}

func getJob(jobs *claim.Client) echo.HandlerFunc {
	return func(ec echo.Context) error {
		id, err := httpx.ParamID(ec, "id") // the one rule: 400 invalid_id
		if err != nil {
			return err
		}
		j, events, err := jobs.Get(ec.Request().Context(), id, MaxEventsShown+1)
		if err != nil {
			return err
		}
		v := JobView{Job: j, Events: events}
		if len(events) > MaxEventsShown {
			v.Events, v.EventsTruncated = events[:MaxEventsShown], true
		}
		if v.Events == nil {
			v.Events = []claim.Event{}
		}
		return ec.JSON(http.StatusOK, v)
	}
}
