package relations

// The kit the relations chapter's experiments (and its e2e tests) drive
// the app with: the app with its tasks off (the experiment drives the
// views' consumers), a Service on the app's pool and faults, one runner
// per view, and readers of the truth table and the views.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/rel"
)

// OpResponse is an operation's HTTP answer.
type OpResponse struct {
	Status int
	Res    rel.Result
}

// HTTPOp is POST of op on other as sub (safe from racing goroutines).
func (e *Lab) HTTPOp(t lab.T, sub string, op rel.Op, other string) OpResponse {
	t.Helper()
	path := fmt.Sprintf("/social/users/%s/%s", other, op)
	if op == rel.OpApprove || op == rel.OpReject {
		path = fmt.Sprintf("/social/requests/%s/%s", other, op)
	}
	// Called from racing goroutines: report with Errorf, never FailNow.
	tok, err := e.Auth.Mint(sub, httpx.RoleUser, time.Hour)
	if err != nil {
		t.Errorf("%s %s: token: %v", op, other, err)
		return OpResponse{}
	}
	resp, err := e.Send(context.Background(), lab.Req{Method: "POST", Path: path, Token: tok})
	if err != nil {
		t.Errorf("%s %s: %v", op, other, err)
		return OpResponse{}
	}
	out := OpResponse{Status: resp.Status}
	if resp.Status == http.StatusOK {
		if err := json.Unmarshal(resp.Body, &out.Res); err != nil {
			t.Errorf("%s %s: %v: %s", op, other, err, resp.Body)
		}
		e.step(sub, op, other, out.Res)
	} else {
		e.x.Step(lab.Step{Actor: sub, Action: fmt.Sprintf("%s %s", op, other), Outcome: lab.Refused, Note: fmt.Sprint(resp.Status)})
	}
	return out
}

// Lab is the app (background tasks off: the test drives the views'
// consumers), a Service on the app's pool and faults, and one runner
// per view.
type Lab struct {
	*lab.App
	Svc     *rel.Service
	Runners map[string]*outbox.Runner
	x       *lab.X
}

func StartLab(x *lab.X, o lab.Options) *Lab {
	t := x
	t.Helper()
	a := x.Start(o)
	svc := labkit.People(t, a)
	e := &Lab{App: a, Svc: svc, Runners: map[string]*outbox.Runner{}, x: x}
	for _, v := range rel.Views {
		e.Runners[v.Name] = e.NewRunner(t, v)
	}
	return e
}

func (e *Lab) NewRunner(t lab.T, v *rel.View) *outbox.Runner {
	t.Helper()
	r, err := outbox.NewRunner(e.Pool, v.Consumer(), outbox.Options{Faults: e.Faults})
	require.NoError(t, err)
	return r
}

// CatchUp applies every committed relation event to every view.
func (e *Lab) CatchUp(t lab.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range rel.Views {
		n, err := e.Runners[v.Name].CatchUp(ctx)
		require.NoError(t, err, v.Name)
		e.x.Step(lab.Step{Actor: v.Name + " view", Action: fmt.Sprintf("catch up: %d events", n), Outcome: lab.Accepted})
	}
}

// Users creates profiles; ids ending in "p" are private.
func (e *Lab) Users(t lab.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := e.Svc.SetProfile(context.Background(), id, id[len(id)-1] == 'p')
		require.NoError(t, err)
	}
}

func (e *Lab) DoOp(t lab.T, op rel.Op, actor, other string) rel.Result {
	t.Helper()
	r, err := e.Svc.Do(context.Background(), op, actor, other)
	require.NoError(t, err, "%s %s %s", op, actor, other)
	e.step(actor, op, other, r)
	return r
}

// step narrates one answered operation: who did what to whom, whether it
// changed the row, and the row's version.
func (e *Lab) step(actor string, op rel.Op, other string, r rel.Result) {
	out := "no change"
	if r.Changed {
		out = lab.Accepted
	}
	e.x.Step(lab.Step{Actor: actor, Action: fmt.Sprintf("%s %s", op, other), Outcome: out,
		Note: fmt.Sprintf("%s, version %d", r.State, r.Version)}) // a row version, not a fence: no "(fence n)"
}

func (e *Lab) Post(t lab.T, author string, v rel.Visibility) rel.Post {
	t.Helper()
	p, err := e.Svc.CreatePost(context.Background(), author, rel.PostRequest{Body: "post by " + author, Visibility: v})
	require.NoError(t, err)
	return p
}

func (e *Lab) UserToken(t lab.T, sub string) string { return e.Token(t, sub, httpx.RoleUser) }

// Read is GET /social/posts/{id} as sub.
func (e *Lab) Read(t lab.T, sub string, id int64) lab.Response {
	t.Helper()
	return e.Do(t, lab.Req{Method: "GET", Path: fmt.Sprintf("/social/posts/%d", id), Token: e.UserToken(t, sub)})
}

func (e *Lab) Call(t lab.T, sub, method, path string, body any) lab.Response {
	t.Helper()
	return e.Do(t, lab.Req{Method: method, Path: path, Token: e.UserToken(t, sub), Body: body})
}

// BadCall is Call for input that breaks the HTTP contract on purpose: it
// is sent as it is and only its answer is checked against the contract.
func (e *Lab) BadCall(t lab.T, sub, method, path string, body any) lab.Response {
	t.Helper()
	return e.Do(t, lab.Req{Method: method, Path: path, Token: e.UserToken(t, sub), Body: body, Invalid: true})
}

type Pair struct{ Follower, Followee string }

// ViewRow is a derived view's row as (follower, followee).
type ViewRow struct {
	Active  bool
	Version int64
}

// Snapshot is a view's rows and counts.
type Snapshot struct {
	Rows   map[Pair]ViewRow
	Counts map[string]int64
}

func ReadView(t lab.T, q pg.Querier, v *rel.View) Snapshot {
	t.Helper()
	ctx := context.Background()
	s := Snapshot{Rows: map[Pair]ViewRow{}, Counts: map[string]int64{}}
	rows, err := q.Query(ctx, "SELECT user_id, peer_id, active, version FROM "+v.Table)
	require.NoError(t, err)
	var (
		user, peer string
		r          ViewRow
	)
	_, err = pgx.ForEachRow(rows, []any{&user, &peer, &r.Active, &r.Version}, func() error {
		if v == rel.FollowersView {
			s.Rows[Pair{peer, user}] = r
		} else {
			s.Rows[Pair{user, peer}] = r
		}
		return nil
	})
	require.NoError(t, err)
	rows, err = q.Query(ctx, "SELECT user_id, n FROM "+v.CountTable+" WHERE n <> 0")
	require.NoError(t, err)
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&user, &n}, func() error { s.Counts[user] = n; return nil })
	require.NoError(t, err)
	return s
}

// Truth reads the truth table.
func Truth(t lab.T, q pg.Querier) map[Pair]rel.Relation {
	t.Helper()
	rows, err := q.Query(context.Background(), "SELECT follower, followee, state, version, updated_at FROM social_relation")
	require.NoError(t, err)
	out := map[Pair]rel.Relation{}
	var r rel.Relation
	_, err = pgx.ForEachRow(rows, []any{&r.Follower, &r.Followee, &r.State, &r.Version, &r.UpdatedAt}, func() error {
		out[Pair{r.Follower, r.Followee}] = r
		return nil
	})
	require.NoError(t, err)
	return out
}

// ExpectedView is what a caught-up view must hold: one row per pair that
// ever changed, active iff the truth says so, at the truth's version; and
// the counts of active rows.
func ExpectedView(tr map[Pair]rel.Relation, v *rel.View) Snapshot {
	s := Snapshot{Rows: map[Pair]ViewRow{}, Counts: map[string]int64{}}
	for p, r := range tr {
		if r.Version == 0 {
			continue
		}
		s.Rows[p] = ViewRow{Active: r.State == rel.StateActive, Version: r.Version}
		if r.State == rel.StateActive {
			if v == rel.FollowersView {
				s.Counts[p.Followee]++
			} else {
				s.Counts[p.Follower]++
			}
		}
	}
	return s
}

// RelEvents reads the social.rel events with id > after, in id order.
func RelEvents(t lab.T, q pg.Querier, after int64) []outbox.Event {
	t.Helper()
	rows, err := q.Query(context.Background(), `
SELECT id, tx_id, topic, key, payload, created_at FROM outbox_event
 WHERE topic = 'social.rel' AND id > $1 ORDER BY id`, after)
	require.NoError(t, err)
	var evs []outbox.Event
	var ev outbox.Event
	_, err = pgx.ForEachRow(rows, []any{&ev.ID, &ev.TxID, &ev.Topic, &ev.Key, &ev.Payload, &ev.Created}, func() error {
		c := ev
		c.Payload = append(json.RawMessage(nil), ev.Payload...)
		evs = append(evs, c)
		return nil
	})
	require.NoError(t, err)
	return evs
}

// Deliver applies evs to v directly (no outbox runner, no inbox), in
// batches of the given sizes, one transaction per batch.
func Deliver(t lab.T, q pg.TxBeginner, v *rel.View, evs []outbox.Event, batch func() int) {
	t.Helper()
	ctx := context.Background()
	for len(evs) > 0 {
		n := min(batch(), len(evs))
		require.NoError(t, pg.InTx(ctx, q, func(tx pgx.Tx) error { return v.Apply(ctx, tx, evs[:n]) }))
		evs = evs[n:]
	}
}

// ResetView empties a view and its counts (a view rebuilt from nothing).
func ResetView(t lab.T, q pg.Querier, v *rel.View) {
	t.Helper()
	_, err := q.Exec(context.Background(), "TRUNCATE "+v.Table+", "+v.CountTable)
	require.NoError(t, err)
}

func RequireStatus(t lab.T, r lab.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	if code != "" {
		require.Equal(t, code, r.Code(), "body: %s", r.Body)
	}
}

func Sorted(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}
