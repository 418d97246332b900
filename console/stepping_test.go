package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// The stepping tests run real lab sessions (lab.StartSession: its
// scheduler, goroutines and a scratch database of the test's PostgreSQL)
// of a toy experiment: two actors that each write one row in two steps.

var stepToyInvariants = invariant.MustRegistry([]invariant.Invariant{
	{ID: "STEP-I1", Module: "toy", Statement: "no value is negative", SQL: `SELECT id, v FROM step_toy WHERE v < 0`},
})

type stepToyEnv struct{ t *testing.T }

func (e stepToyEnv) Database(lab.T) string                 { return pgtest.URL(e.t) }
func (e stepToyEnv) Start(t lab.T, _ lab.Options) *lab.App { t.Fatalf("toy: no app"); return nil }
func (e stepToyEnv) Binary(t lab.T) string                 { t.Fatalf("toy: no binary"); return "" }
func (e stepToyEnv) ChildEnv(string, ...string) []string   { return nil }
func (e stepToyEnv) Dedicated(t lab.T) *pgserver.Server    { t.Fatalf("toy: no server"); return nil }
func (e stepToyEnv) DatabaseOn(t lab.T, _ *pgserver.Server) string {
	t.Fatalf("toy: no server")
	return ""
}
func (e stepToyEnv) Invariants() *invariant.Registry { return stepToyInvariants }

var stepToy = lab.Experiment{
	ID: "points/step-toy", Claim: "two writers", Invariants: []string{"STEP-I1"}, Naive: "the same",
	Explore: &lab.Explore{
		Claim:  "both rows land",
		Actors: []lab.ActorSpec{{Name: "A", Steps: lab.Steps("begin", "write")}, {Name: "B", Steps: lab.Steps("begin", "write")}},
		Run: func(x *lab.X) {
			ctx := context.Background()
			db, err := pgxpool.New(ctx, x.Database())
			if err != nil {
				x.Fatalf("connect: %v", err)
			}
			defer db.Close()
			if _, err := db.Exec(ctx, `CREATE TABLE step_toy (id text PRIMARY KEY, v int NOT NULL)`); err != nil {
				x.Fatalf("create: %v", err)
			}
			x.Interleave(func(a *lab.Actor) {
				a.Step("begin")
				a.Say("begin", "", "")
				a.Step("write")
				if _, err := db.Exec(a.Context(), `INSERT INTO step_toy VALUES ($1, 1)`, a.Name); err != nil {
					x.Error(a.Name, "write", err)
					return
				}
				a.Say("write", lab.Accepted, "")
			})
		},
	},
}

// closeCounter wraps a real session and counts its Close calls.
type closeCounter struct {
	*lab.Session
	mu     sync.Mutex
	closed int
}

func (c *closeCounter) Close() { c.mu.Lock(); c.closed++; c.mu.Unlock(); c.Session.Close() }
func (c *closeCounter) n() int { c.mu.Lock(); defer c.mu.Unlock(); return c.closed }

// toyStore is a store whose sessions run stepToy for real; started
// collects them, its clock is the test's.
func toyStore(t *testing.T, now *time.Time) (*steppingStore, *[]*closeCounter) {
	var (
		mu      sync.Mutex
		started []*closeCounter
	)
	ss := newSteppingStore(func(ctx context.Context, e lab.Experiment, v lab.Variant) (stepper, lab.SessionView, error) {
		s, view, err := lab.StartSession(context.Background(), e, stepToyEnv{t}, v)
		if err != nil {
			return nil, view, err
		}
		c := &closeCounter{Session: s}
		mu.Lock()
		started = append(started, c)
		mu.Unlock()
		return c, view, nil
	})
	ss.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return *now }
	t.Cleanup(ss.Close)
	return ss, &started
}

// A session ends after its idle time without a step, never before: the
// reaper (called here as its ticker would) ends it exactly at 10 minutes
// from the last step, closes the lab session (its database is removed)
// and forgets it, and a step on it after that finds it ended.
func TestAnIdleSteppingSessionEnds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	ss, started := toyStore(t, &now)
	st, err := ss.Open(context.Background(), stepToy, lab.Guarded, "admin-0001")
	require.NoError(t, err)
	view, _ := st.snapshot()
	require.Len(t, view.Waiting, 2, "both actors wait at their first step")

	now = now.Add(steppingIdle - time.Second)
	require.Empty(t, ss.Reap(), "one second short of the idle time")
	_, err = ss.Step(st, "A")
	require.NoError(t, err)
	now = now.Add(steppingIdle - time.Nanosecond)
	require.Empty(t, ss.Reap(), "a step restarts the idle clock")
	now = now.Add(time.Nanosecond)
	require.Equal(t, []string{st.ID}, ss.Reap(), "idle for exactly its idle time: ended")

	require.Nil(t, ss.Get(st.ID, "admin-0001"), "an ended session is forgotten")
	require.Zero(t, ss.Len())
	require.Equal(t, 1, (*started)[0].n(), "its lab session was closed")
	_, err = ss.Step(st, "B")
	require.ErrorIs(t, err, lab.ErrSessionEnded)
}

// The stepping pages answer as the other admin pages do: 403 for a user,
// 404 for an unknown id or another admin's session, 409 for a second
// session of one admin (with a link to the first), 429 when the server's
// sessions are all taken; and a stale click (an actor no longer waiting)
// is a 409 over the current page, never a 500.
func TestSteppingPagesAnswerLikeTheConsole(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	ss, _ := toyStore(t, &now)
	ss.max = 2
	pages, err := parsePages()
	require.NoError(t, err)
	c := &Console{o: Options{Experiments: []lab.Experiment{stepToy}}, pages: pages, stepping: ss,
		checks: newChecker(nil, stepToyInvariants, time.Minute),
		runs:   &Runner{newLab: func(context.Context) (lab.Env, func() error, error) { return nil, nil, errors.New("unused") }}}
	c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	e := echo.New()
	as := func(subject string, role httpx.Role) echo.MiddlewareFunc {
		return func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(ec echo.Context) error {
				ec.Set(principalKey, &session{Principal: httpx.Principal{Subject: subject, Role: role}, CSRF: "t"})
				return next(ec)
			}
		}
	}
	route := func(prefix string, who echo.MiddlewareFunc) {
		g := e.Group(prefix, who, c.admin)
		g.POST("/console/stepping", c.startStepping)
		g.GET("/console/stepping/:id", c.steppingPage)
		g.POST("/console/stepping/:id/step", c.stepStepping)
		g.POST("/console/stepping/:id/end", c.endStepping)
	}
	route("/a1", as("admin-0001", httpx.RoleAdmin))
	route("/a2", as("admin-0002", httpx.RoleAdmin))
	route("/a3", as("admin-0003", httpx.RoleAdmin))
	route("/u", as("user-0042", httpx.RoleUser))
	do := func(method, path string, form url.Values) *httptest.ResponseRecorder {
		var body *strings.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		} else {
			body = strings.NewReader("")
		}
		r := httptest.NewRequest(method, path, body)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w
	}
	start := url.Values{"experiment": {stepToy.ID}, "variant": {"naive"}}

	w := do("POST", "/u/console/stepping", start)
	require.Equal(t, http.StatusForbidden, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), "Admins only")

	w = do("POST", "/a1/console/stepping", start)
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	page := w.Header().Get("Location")
	require.Regexp(t, `^/console/stepping/[0-9a-f]{32}$`, page, "an unguessable id")
	w = do("GET", "/a1"+page, nil)
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), `data-actor="A" data-state="waiting"`)
	require.Contains(t, w.Body.String(), "Run A's next step (begin)")

	require.Equal(t, http.StatusForbidden, do("GET", "/u"+page, nil).Code)
	require.Equal(t, http.StatusNotFound, do("GET", "/a2"+page, nil).Code, "another admin's session is not found")
	require.Equal(t, http.StatusNotFound, do("GET", "/a1/console/stepping/0123456789abcdef0123456789abcdef", nil).Code)
	require.Equal(t, http.StatusNotFound, do("POST", "/a1/console/stepping/nope/step", url.Values{"actor": {"A"}}).Code)
	require.Equal(t, http.StatusBadRequest, do("POST", "/a1/console/stepping", url.Values{"experiment": {stepToy.ID}, "variant": {"control"}}).Code,
		"a version the experiment does not declare")

	w = do("POST", "/a1/console/stepping", start)
	require.Equal(t, http.StatusConflict, w.Code, "one session per admin")
	require.Contains(t, w.Body.String(), `href="`+page+`"`, "the refusal links to the admin's session")
	require.Equal(t, http.StatusSeeOther, do("POST", "/a2/console/stepping", start).Code)
	w = do("POST", "/a3/console/stepping", start)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the server's sessions are all taken")
	require.Contains(t, w.Body.String(), "at most 2 stepping sessions")

	// A step, then a stale click on a step no longer offered.
	w = do("POST", "/a1"+page+"/step", url.Values{"actor": {"A"}})
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	w = do("POST", "/a1"+page+"/step", url.Values{"actor": {"nobody"}})
	require.Equal(t, http.StatusConflict, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), `id="step-problem"`)

	// Ending it frees the place; its page is gone.
	w = do("POST", "/a1"+page+"/end", nil)
	require.Equal(t, http.StatusSeeOther, w.Code)
	require.Equal(t, "/console/chapters/points#exp-points--step-toy", w.Header().Get("Location"))
	require.Equal(t, http.StatusNotFound, do("GET", "/a1"+page, nil).Code)
	require.Equal(t, http.StatusSeeOther, do("POST", "/a3/console/stepping", start).Code)
}

// Two clicks at once on one session are serialised: each releases its
// actor in turn (lab.Session.Next is one choice at a time), and the
// schedule records both, once each.
func TestSteppingClicksAtOnceAreSerialised(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	ss, _ := toyStore(t, &now)
	st, err := ss.Open(context.Background(), stepToy, lab.Guarded, "admin-0001")
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, actor := range []string{"A", "B"} {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = ss.Step(st, actor) }()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	view, _ := st.snapshot()
	require.ElementsMatch(t, []string{"A", "B"}, view.Schedule)
	require.Equal(t, 2, st.stepped)
}
