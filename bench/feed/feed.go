// Package feedbench is `fencelab bench feed`: push, pull and hybrid on the
// same generated heavy-tailed follow graph, one comparison table.
//
// The graph (default 10,000 users, about 200,000 follows and 100,000
// posts) is generated from a seed and loaded once into a template
// database; each strategy then runs on its own byte-for-byte copy
// (CREATE DATABASE … TEMPLATE), with the feed's derived state rebuilt for
// that strategy, behind the real deployable (every module, the fan-out
// consumer running) on a loopback listener. Per strategy:
//
//  1. reads: random readers (uniform over users) read their first page,
//     then the next one, over HTTP, by a closed loop of clients — p50 and
//     p99;
//  2. rows scanned: the first page of a sample of readers under EXPLAIN
//     (ANALYZE, BUFFERS): rows every scan node produced or filtered out;
//  3. publishes by random authors over HTTP, then inbox rows written per
//     post (mean), once the fan-out consumer has settled them;
//  4. the most followed author publishes one post at a time: publish p99
//     (the HTTP call), and p99 until the post is settled — in every inbox
//     with push — which includes the consumer's poll interval; the max of
//     rows written per post is this author's.
//
// PostgreSQL keeps its durable defaults (fsync on); the server, the load
// generator and PostgreSQL share the machine.
package feedbench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

type config struct {
	strategies []string
	graph      feed.GraphConfig
	threshold  int64
	reads      int
	limit      int
	explain    int
	publishes  int
	celebrity  int
	clients    int
	dbConns    int
	fresh      bool
	keepGraph  bool
}

// Bench is `fencelab bench feed`.
var Bench = app.Bench{Name: "feed", Summary: "push, pull and hybrid home feeds on one generated graph: read and publish latency, rows scanned, inbox size", Run: Run}

// Run runs the benchmark on the process mods make.
func Run(mods []app.Module, args []string) error {
	c := config{graph: feed.DefaultGraph}
	var strategies string
	fs := flag.NewFlagSet("bench feed", flag.ContinueOnError)
	shared := setup.AddServer(fs)
	fs.StringVar(&strategies, "strategy", strings.Join(feed.Strategies, ","), "strategies to compare, comma-separated: push, pull, hybrid")
	fs.IntVar(&c.graph.Users, "users", c.graph.Users, "users in the generated graph")
	fs.Uint64Var(&c.graph.Seed, "seed", c.graph.Seed, "graph seed")
	fs.Float64Var(&c.graph.PostsPerUser, "posts-per-user", c.graph.PostsPerUser, "mean posts per user")
	fs.Float64Var(&c.graph.Followees, "followees", c.graph.Followees, "mean accounts a user follows")
	fs.Int64Var(&c.threshold, "threshold", feed.DefaultThreshold, "hybrid: authors with this many followers or more are pulled")
	fs.IntVar(&c.reads, "reads", 4000, "feed pages read per strategy (first pages and the page after)")
	fs.IntVar(&c.limit, "limit", 20, "page size")
	fs.IntVar(&c.explain, "explain", 500, "readers whose first page is run under EXPLAIN (ANALYZE, BUFFERS)")
	fs.IntVar(&c.publishes, "publishes", 1000, "posts by random authors per strategy")
	fs.IntVar(&c.celebrity, "celebrity", 30, "posts by the most followed author, one at a time")
	fs.IntVar(&c.clients, "clients", 16, "concurrent HTTP clients (closed loop)")
	fs.IntVar(&c.dbConns, "db-conns", app.Defaults().MaxConns, "the server's database pool (FENCELAB_DB_MAX_CONNS)")
	fs.BoolVar(&c.fresh, "fresh-graph", false, "reload the graph template even if it exists")
	fs.BoolVar(&c.keepGraph, "keep-graph", false, "keep the graph template database for the next run on the same --database-url (default: dropped, like every database the bench made)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: fencelab bench feed [--strategy push,pull,hybrid] [flags]\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(strategies, ",") {
		if _, err := feed.ParseStrategy(strings.TrimSpace(s), c.threshold); err != nil {
			return err
		}
		c.strategies = append(c.strategies, strings.TrimSpace(s))
	}
	if c.reads < 1 || c.limit < 1 || c.limit > feed.MaxLimit || c.clients < 1 || c.celebrity < 1 || c.publishes < 1 {
		return errors.New("bench feed: reads, clients, publishes and celebrity must be positive; limit 1..100")
	}
	ctx := context.Background()
	srv, err := shared.Server(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	b := &bench{c: c, srv: srv, secret: crand.Text(), mods: mods}
	return b.run(ctx)
}

type bench struct {
	c      config
	srv    *pgserver.Server
	secret string
	g      *feed.Graph
	top    int // the most followed user
	mods   []app.Module
}

// row is one strategy's line of the table.
type row struct {
	strategy                            string
	build                               time.Duration
	inbox                               int64
	inboxBytes                          int64
	rowsMean                            float64
	rowsMax                             int64
	celebrityRows                       int64
	celebPublishP99, celebP99           time.Duration
	publishP99                          time.Duration
	readP50, readP99                    time.Duration
	scannedMean, scannedP99, scannedMax float64
	buffersMean                         float64
	invariants                          string
}

func (b *bench) run(ctx context.Context) error {
	g, err := feed.Generate(b.c.graph)
	if err != nil {
		return err
	}
	b.g = g
	counts := g.FollowerCounts()
	for u := range counts {
		if counts[u] > counts[b.top] {
			b.top = u
		}
	}
	sorted := slices.Clone(counts)
	slices.Sort(sorted)
	graphDB := fmt.Sprintf("feedbench_graph_%d_%d_%s", b.c.graph.Users, b.c.graph.Seed,
		strings.ReplaceAll(strconv.FormatFloat(b.c.graph.PostsPerUser, 'f', -1, 64), ".", "_"))
	if err := b.template(ctx, graphDB); err != nil {
		return err
	}
	// Remove what the bench made (with a fresh cluster the whole cluster
	// goes anyway; on a given server this leaves it as it was).
	defer func() {
		for _, name := range b.c.strategies {
			_ = b.srv.Exec(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+pgx.Identifier{"feedbench_" + name}.Sanitize()+` WITH (FORCE)`)
		}
		if !b.c.keepGraph {
			_ = b.srv.Exec(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+pgx.Identifier{graphDB}.Sanitize()+` WITH (FORCE)`)
		}
	}()
	var version, fsync string
	if err := queryRow(ctx, b.srv.URL(graphDB), `SELECT current_setting('server_version'), current_setting('fsync')`, nil, &version, &fsync); err != nil {
		return err
	}
	fmt.Printf("fencelab bench feed — PostgreSQL %s (fsync=%s); graph: %d users, %d follows, %d posts (seed %d); followers: max %d (%s), p99 %d, median %d\n",
		version, fsync, len(g.Users), len(g.Follows), len(g.Posts), b.c.graph.Seed, counts[b.top], g.Users[b.top].ID,
		sorted[len(sorted)*99/100], sorted[len(sorted)/2])
	fmt.Printf("hybrid threshold %d; %d clients over HTTP, server pool %d; %d reads (limit %d), %d publishes, %d celebrity publishes per strategy\n",
		b.c.threshold, b.c.clients, b.c.dbConns, b.c.reads, b.c.limit, b.c.publishes, b.c.celebrity)
	fmt.Printf("server, load generator and PostgreSQL share one %d-core machine with other work: figures taken under contention\n\n", runtime.NumCPU())

	var rows []row
	for _, name := range b.c.strategies {
		r, err := b.strategy(ctx, graphDB, name)
		if err != nil {
			return fmt.Errorf("bench feed %s: %w", name, err)
		}
		rows = append(rows, r)
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "strategy\tinbox rows/post mean\tmax (celebrity)\tcelebrity publish p99\tcelebrity until settled p99\tpublish p99\tread p50\tread p99\trows scanned/read mean\tp99\tbuffers/read\tinbox rows\tinbox MB\tbuild\tinvariants\t")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%.1f\t%d\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%d\t%.0f\t%s\t%s\t\n",
			r.strategy, r.rowsMean, r.rowsMax, ms(r.celebPublishP99), ms(r.celebP99), ms(r.publishP99),
			ms(r.readP50), ms(r.readP99), r.scannedMean, r.scannedP99, r.buffersMean, r.inbox,
			float64(r.inboxBytes)/(1<<20), r.build.Round(100*time.Millisecond), r.invariants)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	// One RESULT line: each strategy's read p99 and rows per post, side by side.
	kv := []any{"users", b.g.Config.Users, "clients", b.c.clients}
	verdict := "ok"
	for _, r := range rows {
		kv = append(kv, r.strategy+"_read_p99_ms", r.readP99, r.strategy+"_publish_p99_ms", r.publishP99,
			r.strategy+"_inbox_rows_per_post", r.rowsMean)
		if r.invariants != "ok" {
			verdict = "violated"
		}
	}
	fmt.Println()
	load.Result("feed", append(kv, "invariants", verdict)...)
	return nil
}

// template loads the graph once into its own database (truth, pull-built
// feed state, every consumer caught up), reused while it exists.
func (b *bench) template(ctx context.Context, db string) error {
	admin := b.srv.URL("postgres")
	var exists bool
	if err := queryRow(ctx, admin, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, []any{db}, &exists); err != nil {
		return err
	}
	if exists && !b.c.fresh {
		fmt.Printf("graph: reusing database %s\n", db)
		return nil
	}
	if err := b.srv.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{db}.Sanitize()); err != nil {
		return err
	}
	url, _, err := setup.Scratch(ctx, b.srv, db) // dropped with the strategies' copies, or kept (--keep-graph)
	if err != nil {
		return err
	}
	pool, err := pg.Connect(ctx, url, pg.PoolOptions{MaxConns: 4, ApplicationName: "fencelab-bench-feed"})
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	pull, err := feed.ParseStrategy("pull", 0)
	if err != nil {
		return err
	}
	s, err := feed.Load(ctx, pool, b.g, pull)
	if err != nil {
		return err
	}
	// Pass the loaded events now, so no consumer replays them while a
	// strategy is measured.
	consumers := []outbox.Consumer{{Name: feed.ConsumerName, Topics: []string{rel.PostTopic, rel.Topic},
		HandleBatch: func(context.Context, pgx.Tx, []outbox.Event) error { return errors.New("the load applied every event") }}}
	for _, v := range rel.Views {
		consumers = append(consumers, v.Consumer())
	}
	for _, c := range consumers {
		c.BatchSize = 5000
		r, err := outbox.NewRunner(pool, c, outbox.Options{})
		if err != nil {
			return err
		}
		if _, err := r.CatchUp(ctx); err != nil {
			return fmt.Errorf("catch up %s: %w", c.Name, err)
		}
	}
	fmt.Printf("graph: loaded into %s in %s (truth %s, views %s; %d users, %d relations, %d posts)\n", db,
		time.Since(start).Round(time.Second), s.Truth.Round(time.Second), s.Views.Round(time.Second), s.Users, s.Relations, s.Posts)
	return nil
}

// strategy measures one strategy on a fresh copy of the graph.
func (b *bench) strategy(ctx context.Context, graphDB, name string) (row, error) {
	r := row{strategy: name}
	st, _ := feed.ParseStrategy(name, b.c.threshold)
	db := "feedbench_" + name
	if err := b.srv.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{db}.Sanitize()); err != nil {
		return r, err
	}
	if err := b.srv.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s STRATEGY FILE_COPY`,
		pgx.Identifier{db}.Sanitize(), pgx.Identifier{graphDB}.Sanitize())); err != nil {
		return r, err
	}
	url := b.srv.URL(db)
	s, err := b.serve(ctx, url, st)
	if err != nil {
		return r, err
	}
	defer s.close()
	built, err := feed.Rebuild(ctx, s.pool, st)
	if err != nil {
		return r, err
	}
	r.build, r.inbox = built.Derived, built.Inbox
	if err := s.pool.QueryRow(ctx, `SELECT pg_total_relation_size('social_feed_inbox')`).Scan(&r.inboxBytes); err != nil {
		return r, err
	}
	fmt.Printf("%s: feed state built in %s: %d inbox rows (%.0f MB), %d of %d posts pushed, %d authors pulled\n",
		name, built.Derived.Round(100*time.Millisecond), built.Inbox, float64(r.inboxBytes)/(1<<20), built.Pushed, built.Settled, built.PullSet)
	s.proc.StartBackground() // the fan-out consumer and every other task

	// 1. Reads: a first page, then the page after it.
	rng := rand.New(rand.NewPCG(b.c.graph.Seed, 7))
	_, _ = s.reads(ctx, b.c.reads/10, b.c.limit, b.c.clients, rng) // warm-up
	lat, errs := s.reads(ctx, b.c.reads, b.c.limit, b.c.clients, rng)
	if errs > 0 {
		return r, fmt.Errorf("%d reads failed", errs)
	}
	r.readP50, r.readP99 = quantile(lat, 0.5), quantile(lat, 0.99)

	// 2. Rows scanned by a first page.
	var scanned, buffers []float64
	for range b.c.explain {
		reader := b.g.Users[rng.IntN(len(b.g.Users))].ID
		x, err := s.feed.Explain(ctx, st, reader, b.c.limit)
		if err != nil {
			return r, err
		}
		scanned, buffers = append(scanned, float64(x.RowsScanned)), append(buffers, float64(x.Buffers))
	}
	r.scannedMean, r.scannedP99, r.scannedMax, r.buffersMean = mean(scanned), quantileF(scanned, 0.99), slices.Max(scanned), mean(buffers)

	// 3. Publishes by random authors.
	ids, lat, err := s.publish(ctx, b.c.publishes, b.c.clients, func(rng *rand.Rand) string {
		return b.g.Users[rng.IntN(len(b.g.Users))].ID
	})
	if err != nil {
		return r, err
	}
	r.publishP99 = quantile(lat, 0.99)
	if err := s.waitSettled(ctx, ids); err != nil {
		return r, err
	}
	perPost, err := s.inboxRows(ctx, ids)
	if err != nil {
		return r, err
	}
	r.rowsMean = meanI(perPost)

	// 4. The most followed author, one post at a time.
	celebrity := b.g.Users[b.top].ID
	var publishLat, settledLat []time.Duration
	var celebIDs []int64
	for range b.c.celebrity {
		start := time.Now()
		id, err := s.post(ctx, celebrity)
		if err != nil {
			return r, err
		}
		publishLat = append(publishLat, time.Since(start))
		if err := s.waitSettled(ctx, []int64{id}); err != nil {
			return r, err
		}
		settledLat = append(settledLat, time.Since(start))
		celebIDs = append(celebIDs, id)
	}
	r.celebPublishP99, r.celebP99 = quantile(publishLat, 0.99), quantile(settledLat, 0.99)
	celebRows, err := s.inboxRows(ctx, celebIDs)
	if err != nil {
		return r, err
	}
	r.rowsMax = slices.Max(append(perPost, celebRows...))
	fmt.Printf("%s: reads p50 %s p99 %s; rows scanned %.0f (p99 %.0f, max %.0f); publishes p99 %s, %.1f inbox rows per post; %s: publish p99 %s, settled p99 %s, %d rows per post\n",
		name, ms(r.readP50), ms(r.readP99), r.scannedMean, r.scannedP99, r.scannedMax, ms(r.publishP99), r.rowsMean,
		celebrity, ms(r.celebPublishP99), ms(r.celebP99), slices.Max(celebRows))

	s.proc.StopBackground()
	r.invariants = "ok"
	for _, res := range s.proc.Invariants.Run(ctx, s.pool, "social") {
		if !res.Holds() {
			var sb strings.Builder
			invariant.Format(&sb, res)
			fmt.Print(sb.String())
			r.invariants = "FAIL"
		}
	}
	return r, nil
}

// server is the deployable on one strategy's database.
type server struct {
	pool   *pgxpool.Pool
	proc   *setup.InProcess
	deps   app.Deps
	feed   *feed.Service
	base   string
	client *http.Client
	g      *feed.Graph
	close  func()
}

func (b *bench) serve(ctx context.Context, url string, st feed.Strategy) (*server, error) {
	cfg := app.Defaults()
	cfg.DatabaseURL, cfg.AccessLog, cfg.MaxConns, cfg.TokenSecret = url, false, b.c.dbConns, b.secret
	cfg.Settings = map[string]string{feed.EnvStrategy: st.Name(), feed.EnvThreshold: strconv.FormatInt(b.c.threshold, 10)}
	p, err := setup.StartInProcess(ctx, cfg, b.mods, setup.InProcessOptions{Build: app.BuildOptions{Role: "bench-feed"}})
	if err != nil {
		return nil, err
	}
	pool := p.Deps.Pool
	fcfg, err := feed.LoadConfig(cfg)
	if err != nil {
		p.Close()
		return nil, err
	}
	fsvc, err := feed.NewService(app.Standalone(pool), fcfg)
	if err != nil {
		p.Close()
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: b.c.clients, MaxConnsPerHost: b.c.clients}
	s := &server{pool: pool, proc: p, deps: p.Deps, feed: fsvc, base: p.Base,
		client: &http.Client{Transport: tr, Timeout: 60 * time.Second}, g: b.g}
	s.close = func() {
		tr.CloseIdleConnections()
		p.Close()
	}
	return s, nil
}

func (s *server) token(user string) string {
	t, err := s.deps.Auth.Mint(user, httpx.RoleUser, time.Hour)
	if err != nil {
		panic(err) // generated ids are valid subjects
	}
	return t
}

// reads runs n page reads from clients: a random reader's first page, then
// its next page when there is one.
func (s *server) reads(ctx context.Context, n, limit, clients int, rng *rand.Rand) ([]time.Duration, int) {
	readers := make(chan string, n)
	for range (n + 1) / 2 {
		readers <- s.g.Users[rng.IntN(len(s.g.Users))].ID
	}
	close(readers)
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs int
		wg   sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			for reader := range readers {
				tok := s.token(reader)
				cursor := ""
				for page := range 2 {
					start := time.Now()
					next, err := s.read(ctx, tok, cursor, limit)
					d := time.Since(start)
					mu.Lock()
					lat = append(lat, d)
					if err != nil {
						errs++
					}
					mu.Unlock()
					if err != nil || next == "" || page == 1 {
						break
					}
					cursor = next
				}
			}
		})
	}
	wg.Wait()
	return lat, errs
}

func (s *server) read(ctx context.Context, tok, cursor string, limit int) (string, error) {
	u := fmt.Sprintf("%s/social/feed?limit=%d", s.base, limit)
	if cursor != "" {
		u += "&cursor=" + cursor
	}
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /social/feed: %d %s", resp.StatusCode, body)
	}
	var p struct {
		Next string `json:"next"`
	}
	return p.Next, json.Unmarshal(body, &p)
}

// post publishes a PUBLIC post as author and returns its id.
func (s *server) post(ctx context.Context, author string) (int64, error) {
	body, _ := json.Marshal(rel.PostRequest{Body: "bench post", Visibility: rel.Public})
	req, err := http.NewRequestWithContext(ctx, "POST", s.base+"/social/posts", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token(author))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("POST /social/posts: %d %s", resp.StatusCode, out)
	}
	var p rel.Post
	return p.PostID, json.Unmarshal(out, &p)
}

// publish posts n times from clients, authors chosen by pick.
func (s *server) publish(ctx context.Context, n, clients int, pick func(*rand.Rand) string) ([]int64, []time.Duration, error) {
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	var (
		mu    sync.Mutex
		ids   []int64
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	for w := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 17))
			for range jobs {
				start := time.Now()
				id, err := s.post(ctx, pick(rng))
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				ids, lat = append(ids, id), append(lat, time.Since(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids, lat, first
}

// waitSettled polls until every post is settled (in every inbox, when
// pushed: one transaction does both).
func (s *server) waitSettled(ctx context.Context, ids []int64) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var left int
		err := s.pool.QueryRow(ctx, `
SELECT count(*) FROM unnest($1::bigint[]) AS p(id)
 WHERE NOT EXISTS (SELECT 1 FROM social_feed_post fp WHERE fp.post_id = p.id)`, ids).Scan(&left)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d posts not settled after 5 minutes", left)
		}
		time.Sleep(time.Millisecond)
	}
}

// inboxRows is the inbox rows written for each post.
func (s *server) inboxRows(ctx context.Context, ids []int64) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `
SELECT coalesce(n, 0) FROM unnest($1::bigint[]) AS p(id)
  LEFT JOIN (SELECT post_id, count(*) AS n FROM social_feed_inbox WHERE post_id = ANY ($1) GROUP BY post_id) c
         ON c.post_id = p.id`, ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// queryRow runs one query on its own connection (admin work outside the
// measured pools).
func queryRow(ctx context.Context, url, sql string, args []any, dst ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql, args...).Scan(dst...)
}

// quantile is the q-quantile of d, from the harness's histogram.
func quantile(d []time.Duration, q float64) time.Duration { return load.Of(d).Quantile(q) }

func quantileF(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

func meanI(v []int64) float64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return mean(f)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
