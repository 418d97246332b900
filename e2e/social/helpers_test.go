package social_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/rel"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// env is the app (background tasks off: the test drives the views'
// consumers), a rel.Service on the app's pool and faults, and one runner
// per view.
type env struct {
	a       *e2etest.App
	svc     *rel.Service
	runners map[string]*outbox.Runner
}

func setup(t *testing.T) *env {
	t.Helper()
	a := e2etest.Start(t, e2etest.Options{})
	e := &env{a: a, svc: rel.NewService(a.Pool, a.Faults, nil), runners: map[string]*outbox.Runner{}}
	for _, v := range rel.Views {
		e.runners[v.Name] = e.newRunner(t, v)
	}
	return e
}

func (e *env) newRunner(t *testing.T, v *rel.View) *outbox.Runner {
	t.Helper()
	r, err := outbox.NewRunner(e.a.Pool, v.Consumer(), outbox.Options{Faults: e.a.Faults})
	require.NoError(t, err)
	return r
}

// catchUp applies every committed relation event to every view.
func (e *env) catchUp(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range rel.Views {
		_, err := e.runners[v.Name].CatchUp(ctx)
		require.NoError(t, err, v.Name)
	}
}

// users creates profiles; ids ending in "p" are private.
func (e *env) users(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := e.svc.SetProfile(context.Background(), id, id[len(id)-1] == 'p')
		require.NoError(t, err)
	}
}

func (e *env) do(t *testing.T, op rel.Op, actor, other string) rel.Result {
	t.Helper()
	r, err := e.svc.Do(context.Background(), op, actor, other)
	require.NoError(t, err, "%s %s %s", op, actor, other)
	return r
}

func (e *env) post(t *testing.T, author string, v rel.Visibility) rel.Post {
	t.Helper()
	p, err := e.svc.CreatePost(context.Background(), author, rel.PostRequest{Body: "post by " + author, Visibility: v})
	require.NoError(t, err)
	return p
}

func (e *env) token(t *testing.T, sub string) string { return e.a.Token(t, sub, httpx.RoleUser) }

// read is GET /social/posts/{id} as sub.
func (e *env) read(t *testing.T, sub string, id int64) e2etest.Response {
	t.Helper()
	return e.a.Do(t, e2etest.Req{Method: "GET", Path: fmt.Sprintf("/social/posts/%d", id), Token: e.token(t, sub)})
}

func (e *env) call(t *testing.T, sub, method, path string, body any) e2etest.Response {
	t.Helper()
	return e.a.Do(t, e2etest.Req{Method: method, Path: path, Token: e.token(t, sub), Body: body})
}

// badCall is call for input that breaks the HTTP contract on purpose: it
// is sent as it is and only its answer is checked against the contract.
func (e *env) badCall(t *testing.T, sub, method, path string, body any) e2etest.Response {
	t.Helper()
	return e.a.Do(t, e2etest.Req{Method: method, Path: path, Token: e.token(t, sub), Body: body, Invalid: true})
}

type pair struct{ follower, followee string }

// viewRow is a derived view's row as (follower, followee).
type viewRow struct {
	Active  bool
	Version int64
}

// snapshot is a view's rows and counts.
type snapshot struct {
	Rows   map[pair]viewRow
	Counts map[string]int64
}

func readView(t *testing.T, q pg.Querier, v *rel.View) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{Rows: map[pair]viewRow{}, Counts: map[string]int64{}}
	rows, err := q.Query(ctx, "SELECT user_id, peer_id, active, version FROM "+v.Table)
	require.NoError(t, err)
	var (
		user, peer string
		r          viewRow
	)
	_, err = pgx.ForEachRow(rows, []any{&user, &peer, &r.Active, &r.Version}, func() error {
		if v == rel.FollowersView {
			s.Rows[pair{peer, user}] = r
		} else {
			s.Rows[pair{user, peer}] = r
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

// truth reads the truth table.
func truth(t *testing.T, q pg.Querier) map[pair]rel.Relation {
	t.Helper()
	rows, err := q.Query(context.Background(), "SELECT follower, followee, state, version, updated_at FROM social_relation")
	require.NoError(t, err)
	out := map[pair]rel.Relation{}
	var r rel.Relation
	_, err = pgx.ForEachRow(rows, []any{&r.Follower, &r.Followee, &r.State, &r.Version, &r.UpdatedAt}, func() error {
		out[pair{r.Follower, r.Followee}] = r
		return nil
	})
	require.NoError(t, err)
	return out
}

// expectedView is what a caught-up view must hold: one row per pair that
// ever changed, active iff the truth says so, at the truth's version; and
// the counts of active rows.
func expectedView(tr map[pair]rel.Relation, v *rel.View) snapshot {
	s := snapshot{Rows: map[pair]viewRow{}, Counts: map[string]int64{}}
	for p, r := range tr {
		if r.Version == 0 {
			continue
		}
		s.Rows[p] = viewRow{Active: r.State == rel.StateActive, Version: r.Version}
		if r.State == rel.StateActive {
			if v == rel.FollowersView {
				s.Counts[p.followee]++
			} else {
				s.Counts[p.follower]++
			}
		}
	}
	return s
}

// relEvents reads the social.rel events with id > after, in id order.
func relEvents(t *testing.T, q pg.Querier, after int64) []outbox.Event {
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

// deliver applies evs to v directly (no outbox runner, no inbox), in
// batches of the given sizes, one transaction per batch.
func deliver(t *testing.T, q pg.TxBeginner, v *rel.View, evs []outbox.Event, batch func() int) {
	t.Helper()
	ctx := context.Background()
	for len(evs) > 0 {
		n := min(batch(), len(evs))
		require.NoError(t, pg.InTx(ctx, q, func(tx pgx.Tx) error { return v.Apply(ctx, tx, evs[:n]) }))
		evs = evs[n:]
	}
}

// resetView empties a view and its counts (a view rebuilt from nothing).
func resetView(t *testing.T, q pg.Querier, v *rel.View) {
	t.Helper()
	_, err := q.Exec(context.Background(), "TRUNCATE "+v.Table+", "+v.CountTable)
	require.NoError(t, err)
}

func requireStatus(t *testing.T, r e2etest.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	if code != "" {
		require.Equal(t, code, r.Code(), "body: %s", r.Body)
	}
}

func sorted(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}

var _ = http.StatusOK
