package ops

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/promx"
)

// EnvOutboxDemo runs the demo consumer in this process (the two-process
// experiment and `fencelab bench outbox`).
const EnvOutboxDemo = "FENCELAB_OUTBOX_DEMO"

// Outbox is chapter 4's library as a module: GET /outbox/consumers
// (admin), the lag metrics, the retention purge and — with
// FENCELAB_OUTBOX_DEMO=1 — the demo consumer. Modules run their own
// consumers with app.ConsumerTask.
func Outbox() app.Module {
	return app.Module{
		Name: "outbox", Chapter: "outbox",
		Invariants: outbox.Invariants,
		Build:      buildOutbox,
	}
}

func buildOutbox(d app.Deps) (app.Runtime, error) {
	promx.Register(d.Registerer(), outbox.LagCollector(d.Pool, d.Log))
	retention := outbox.DefaultRetention
	demo := false
	r := app.NewSettingsReader(d.Config, "outbox")
	r.Duration("FENCELAB_OUTBOX_RETENTION", &retention, time.Minute, 366*24*time.Hour)
	r.Bool(EnvOutboxDemo, &demo)
	if err := r.Err(); err != nil {
		return app.Runtime{}, err
	}
	rt := app.Runtime{
		Routes: func(e *echo.Echo) {
			e.GET("/outbox/consumers", consumers(d.Pool), d.Auth.Require(httpx.RoleAdmin))
		},
		// The purge is a periodic claim job: one run per slot across processes.
		Kinds: []claim.Kind{claim.RetentionKind("outbox.purge", retention, func(ctx context.Context) (any, error) {
			n, err := outbox.Purge(ctx, d.Pool, retention)
			return claim.Deleted(n), err
		})},
	}
	if demo {
		t, err := app.ConsumerTask(d, outbox.DemoConsumer())
		if err != nil {
			return app.Runtime{}, err
		}
		rt.Tasks = append(rt.Tasks, t)
	}
	return rt, nil
}

func consumers(pool *pgxpool.Pool) echo.HandlerFunc {
	return func(c echo.Context) error {
		ss, err := outbox.Statuses(c.Request().Context(), pool)
		if err != nil {
			return err
		}
		if ss == nil {
			ss = []outbox.ConsumerStatus{}
		}
		return c.JSON(http.StatusOK, map[string]any{"consumers": ss})
	}
}
