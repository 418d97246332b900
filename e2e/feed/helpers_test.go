package feed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// env is the app (background tasks off: the test drives the fan-out
// consumer), rel and feed services on its pool, and the consumer's runner.
type env struct {
	a      *e2etest.App
	rel    *rel.Service
	feed   *feed.Service
	fanout *outbox.Runner
	views  []*outbox.Runner // rel's follower views
}

// setup starts the app with the fan-out strategy (threshold for hybrid)
// and the response log on, so FEED-I1 judges every page served; extra
// holds further settings as name, value pairs.
func setup(t *testing.T, strategy string, threshold int, extra ...string) *env {
	t.Helper()
	settings := map[string]string{
		feed.EnvStrategy:        strategy,
		feed.EnvThreshold:       strconv.Itoa(threshold),
		feed.EnvResponseLog:     "true",
		feed.EnvResponseLogRows: "10000000",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		settings[extra[i]] = extra[i+1]
	}
	a := e2etest.Start(t, e2etest.Options{Settings: settings})
	cfg, err := feed.LoadConfig(a.Deps.Config)
	require.NoError(t, err)
	fs, err := feed.NewService(labenv.Deps(a.App), cfg)
	require.NoError(t, err)
	c := fs.Consumer()
	c.BatchSize = 500 // catching up after a bulk load: the loaded events are skipped as applied
	r, err := outbox.NewRunner(a.Pool, c, outbox.Options{Faults: a.Faults})
	require.NoError(t, err)
	people, err := rel.NewService(labenv.Deps(a.App))
	require.NoError(t, err)
	e := &env{a: a, rel: people, feed: fs, fanout: r}
	for _, v := range rel.Views {
		c := v.Consumer()
		c.BatchSize = 1000
		r, err := outbox.NewRunner(a.Pool, c, outbox.Options{})
		require.NoError(t, err)
		e.views = append(e.views, r)
	}
	return e
}

// catchUp applies every committed event to the inboxes and to rel's
// views (their lag is checked by REL-I4 at the end of every test).
func (e *env) catchUp(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.fanout.CatchUp(ctx)
	require.NoError(t, err)
	for _, r := range e.views {
		_, err = r.CatchUp(ctx)
		require.NoError(t, err)
	}
}

func (e *env) token(t testing.TB, sub string) string { return e.a.Token(t, sub, httpx.RoleUser) }

func (e *env) users(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := e.rel.SetProfile(context.Background(), id, id[len(id)-1] == 'p')
		require.NoError(t, err)
	}
}

func (e *env) do(t *testing.T, op rel.Op, actor, other string) {
	t.Helper()
	_, err := e.rel.Do(context.Background(), op, actor, other)
	require.NoError(t, err, "%s %s %s", op, actor, other)
}

func (e *env) post(t *testing.T, author string, v rel.Visibility) rel.Post {
	t.Helper()
	p, err := e.rel.CreatePost(context.Background(), author, rel.PostRequest{Body: "post by " + author, Visibility: v})
	require.NoError(t, err)
	return p
}

// get is GET /social/feed as reader; a zero limit is left out.
func (e *env) get(ctx context.Context, t testing.TB, reader, strategy, cursor string, limit int) (e2etest.Response, error) {
	q := url.Values{}
	if strategy != "" {
		q.Set("strategy", strategy)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	// Runs on reader goroutines (feed01): errors are returned, never FailNow.
	tok, err := e.a.Deps.Auth.Mint(reader, httpx.RoleUser, time.Hour)
	if err != nil {
		return e2etest.Response{}, err
	}
	return e.a.Send(ctx, e2etest.Req{Method: "GET", Path: "/social/feed?" + q.Encode(), Token: tok})
}

// page reads one page and requires a 200.
func (e *env) page(t testing.TB, reader, strategy, cursor string, limit int) feed.Page {
	t.Helper()
	r, err := e.get(context.Background(), t, reader, strategy, cursor, limit)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	var p feed.Page
	r.JSON(t, &p)
	return p
}

// scroll reads every page and returns them (nil and the problem code
// when the first page is refused).
func (e *env) scroll(t testing.TB, reader, strategy string, limit int) ([]feed.Page, string) {
	t.Helper()
	pages, code, err := e.scrollErr(context.Background(), t, reader, strategy, limit)
	require.NoError(t, err)
	return pages, code
}

// scrollErr is scroll for goroutines: it reports instead of failing.
func (e *env) scrollErr(ctx context.Context, t testing.TB, reader, strategy string, limit int) ([]feed.Page, string, error) {
	var pages []feed.Page
	cursor := ""
	for {
		r, err := e.get(ctx, t, reader, strategy, cursor, limit)
		if err != nil {
			return nil, "", err
		}
		if r.Status != http.StatusOK {
			if len(pages) > 0 {
				return nil, "", fmt.Errorf("%s page %d refused: %s", reader, len(pages)+1, r.Body)
			}
			return nil, r.Code(), nil
		}
		var p feed.Page
		if err := json.Unmarshal(r.Body, &p); err != nil {
			return nil, "", err
		}
		if p.Strategy != strategy {
			return nil, "", fmt.Errorf("%s: asked %s, answered %s", reader, strategy, p.Strategy)
		}
		pages = append(pages, p)
		if p.Next == "" {
			return pages, "", nil
		}
		if len(pages) > 10_000 {
			return nil, "", fmt.Errorf("%s: the scroll does not end", reader)
		}
		cursor = p.Next
	}
}

// ids flattens pages into post ids, in order.
func ids(pages []feed.Page) []int64 {
	var out []int64
	for _, p := range pages {
		for _, post := range p.Posts {
			out = append(out, post.PostID)
		}
	}
	return out
}

// pageIDs is each page's post ids.
func pageIDs(pages []feed.Page) [][]int64 {
	out := make([][]int64, len(pages))
	for i, p := range pages {
		for _, post := range p.Posts {
			out[i] = append(out[i], post.PostID)
		}
	}
	return out
}

// inboxHas reports whether reader's inbox holds the post.
func (e *env) inboxHas(t *testing.T, reader string, postID int64) bool {
	t.Helper()
	var ok bool
	require.NoError(t, e.a.Pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM social_feed_inbox WHERE reader = $1 AND post_id = $2)`, reader, postID).Scan(&ok))
	return ok
}

// key is a post's place in the feed order.
type key struct {
	at time.Time
	id int64
}

func (k key) after(o key) bool { return k.at.After(o.at) || (k.at.Equal(o.at) && k.id > o.id) }

// truthPost is a post as the database holds it.
type truthPost struct {
	key
	author     string
	visibility rel.Visibility
}

func posts(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []truthPost {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT post_id, created_at, author, visibility FROM social_post ORDER BY post_id`)
	require.NoError(t, err)
	var out []truthPost
	var p truthPost
	_, err = pgx.ForEachRow(rows, []any{&p.id, &p.at, &p.author, &p.visibility}, func() error {
		out = append(out, p)
		return nil
	})
	require.NoError(t, err)
	return out
}

// newestFirst sorts ids by their posts' keys, newest first.
func newestFirst(ps map[int64]truthPost, ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b int64) int {
		ka, kb := ps[a].key, ps[b].key
		switch {
		case ka.after(kb):
			return -1
		case kb.after(ka):
			return 1
		}
		return 0
	})
	return out
}

func requireProblem(t *testing.T, r e2etest.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	require.Equal(t, code, r.Code(), "body: %s", r.Body)
}
