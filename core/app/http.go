package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/migrations"
)

// Settings of the HTTP edge (environment, or Config.Settings in tests).
const (
	// EnvAdmissionLimit: write requests (POST, PUT, PATCH, DELETE) running
	// at once in this process (default 4 × the pool size).
	EnvAdmissionLimit = "FENCELAB_ADMISSION_LIMIT"
	// EnvAdmissionWaitLine: write requests allowed to wait for a slot
	// (default 16 × the pool size); beyond it, 503 overloaded + Retry-After.
	EnvAdmissionWaitLine = "FENCELAB_ADMISSION_WAIT_LINE"
	// EnvAdmissionMaxWait: the longest a write request waits in line
	// before it is refused with 503 (default 2s).
	EnvAdmissionMaxWait = "FENCELAB_ADMISSION_MAX_WAIT"
	// EnvBodyTimeout: the time a request body may take to arrive (default
	// 10s; upload chunk routes get EnvLargeBodyTimeout, default 2m).
	EnvBodyTimeout      = "FENCELAB_BODY_TIMEOUT"
	EnvLargeBodyTimeout = "FENCELAB_LARGE_BODY_TIMEOUT"
)

// HTTPSettings are the HTTP edge's limits.
type HTTPSettings struct {
	AdmissionLimit, AdmissionWaitLine int
	AdmissionMaxWait                  time.Duration
	BodyTimeout, LargeBodyTimeout     time.Duration
}

// LoadHTTPSettings reads the HTTP edge's settings; Validate reports a
// malformed one at start-up.
func LoadHTTPSettings(c Config) (HTTPSettings, error) {
	conns := max(c.MaxConns, 1)
	s := HTTPSettings{
		AdmissionLimit: 4 * conns, AdmissionWaitLine: 16 * conns, AdmissionMaxWait: 2 * time.Second,
		BodyTimeout: httpx.DefaultBodyTimeout, LargeBodyTimeout: httpx.DefaultLargeBodyTimeout,
	}
	r := NewSettingsReader(c, "http")
	r.Int(EnvAdmissionLimit, &s.AdmissionLimit, 1, 100000)
	r.Int(EnvAdmissionWaitLine, &s.AdmissionWaitLine, 0, 1000000)
	r.Duration(EnvAdmissionMaxWait, &s.AdmissionMaxWait, time.Millisecond, time.Minute)
	r.Duration(EnvBodyTimeout, &s.BodyTimeout, time.Millisecond, 10*time.Minute)
	r.Duration(EnvLargeBodyTimeout, &s.LargeBodyTimeout, time.Millisecond, time.Hour)
	return s, r.Err()
}

// unreachable is readyz's answer while the database does not answer: 503
// with Retry-After, like every answer of an outage.
func unreachable() *httpx.Problem {
	p := httpx.NewProblem(http.StatusServiceUnavailable, "database_unreachable", "database did not answer")
	p.RetryAfter = 1
	return p
}

// ReadyzAcquireTimeout bounds the wait for a connection in a readiness
// check. While the database is away a new connection can hang rather than
// fail (a proxy in front of it holds the attempt until its connect
// timeout, seconds): a probe that waited for it answered 503 long after
// the database was back and requests already succeeded (issue 36: over a
// second). Bounded, a probe started during the outage answers within this
// time and the next one checks afresh, so /readyz follows a recovery
// within one probe interval and this bound. The pool keeps the abandoned
// attempt: it is not wasted. The queries on a connection once held keep
// the longer bound (a busy machine may take a while to answer a ping; a
// dead peer fails them at once). It was 250 ms: on a loaded machine a new
// connection to a healthy database took longer than that just after
// start-up (the background tasks open theirs at the same moment), and the
// first probe answered "database_unreachable" for a database that was
// there. A second still keeps a probe far from a hung connect's seconds.
const ReadyzAcquireTimeout = time.Second

// readyz answers 200 only when the database answers and its schema is at
// the binary's migration version: a replica with an old schema must not
// take traffic. A pool whose every connection is in use is "busy" (503
// busy, Retry-After), which is not "unreachable": the database is
// healthy, this process is at its capacity.
func readyz(c echo.Context, d Deps) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	actx, cancelAcquire := context.WithTimeout(ctx, ReadyzAcquireTimeout)
	defer cancelAcquire()
	conn, err := d.Pool.Acquire(actx)
	if err != nil {
		st := d.Pool.Stat()
		if st.AcquiredConns() >= st.MaxConns() && errors.Is(err, context.DeadlineExceeded) {
			p := httpx.NewProblem(http.StatusServiceUnavailable, "busy",
				"all %d database connections of this process are in use; retry shortly", st.MaxConns())
			p.RetryAfter = 1
			return p
		}
		return unreachable()
	}
	defer conn.Release()
	if err := conn.Ping(ctx); err != nil {
		return unreachable()
	}
	st, err := pg.ReadMigrationState(ctx, conn, migrations.FS)
	if err != nil {
		if ctx.Err() != nil { // the database stopped answering mid-check
			return unreachable()
		}
		return httpx.NewProblem(http.StatusServiceUnavailable, "migrations_unreadable", "cannot read the schema version")
	}
	if !st.Current() {
		return httpx.NewProblem(http.StatusServiceUnavailable, "migrations_pending",
			"schema at version %d (dirty=%v), binary expects %d; run `fencelab migrate up`", st.Version, st.Dirty, st.Latest)
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "schema_version": st.Version})
}
