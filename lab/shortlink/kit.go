package shortlink

// The kit the short-links chapter's experiments (and its e2e tests) drive
// a replica with.

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/promx"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/shortlink"
)

// Lab is one replica of the app as the chapter's experiments (and its e2e
// tests) drive it: its client does not follow redirects, so a visit
// returns the 302 itself.
type Lab struct {
	*lab.App
}

// LabOptions start one replica: Tasks runs the click writer and the
// listener, DBURL shares another replica's database, Settings are
// FENCELAB_SHORTLINK_* settings.
type LabOptions = lab.Options

// StartLab runs a replica on a fresh database (or o.DBURL).
func StartLab(x *lab.X, o lab.Options) *Lab {
	x.Helper()
	a := x.Start(o)
	a.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Lab{App: a}
}

// BadInput is the replica whose every request is marked lab.Req.Invalid:
// bad input on purpose, only the answers are checked against the contract.
func (a *Lab) BadInput() *Lab { return &Lab{App: a.App.BadInput()} }

func (a *Lab) Create(t lab.T, tok string, body any) lab.Response {
	t.Helper()
	return a.Do(t, lab.Req{Method: "POST", Path: "/shortlink/links", Token: tok, Body: body})
}

// MustCreate creates a link and returns it.
func (a *Lab) MustCreate(t lab.T, tok string, req shortlink.CreateRequest) shortlink.Link {
	t.Helper()
	r := a.Create(t, tok, req)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var l shortlink.Link
	r.JSON(t, &l)
	return l
}

func (a *Lab) Visit(t lab.T, code string) lab.Response {
	t.Helper()
	return a.Do(t, lab.Req{Method: "GET", Path: "/s/" + code})
}

func (a *Lab) Revoke(t lab.T, tok, code string) lab.Response {
	t.Helper()
	return a.Do(t, lab.Req{Method: "POST", Path: "/shortlink/links/" + code + "/revoke", Token: tok})
}

func (a *Lab) Stats(t lab.T, tok, code string) shortlink.Stats {
	t.Helper()
	r := a.Do(t, lab.Req{Method: "GET", Path: "/shortlink/links/" + code + "/stats", Token: tok})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var s shortlink.Stats
	r.JSON(t, &s)
	return s
}

// Counted is what the database has counted for a link so far: the clicks
// the click writer stored (shortlink_click_count) and the drops it counted
// (shortlink_click_drops). Zeros when it cannot be read: a poll reads it
// again.
func (a *Lab) Counted(ctx context.Context, code string) (clicks, dropped int64) {
	_ = a.Pool.QueryRow(ctx, `SELECT (SELECT coalesce(sum(clicks), 0) FROM shortlink_click_count WHERE code = $1),
	                                 (SELECT coalesce(sum(dropped), 0) FROM shortlink_click_drops WHERE code = $1)`, code).Scan(&clicks, &dropped)
	return clicks, dropped
}

func (a *Lab) UserToken(t lab.T, sub string) string {
	return a.Token(t, sub, httpx.RoleUser)
}

// Counter sums the samples of a counter family in a replica's registry
// whose labels include the given pairs.
func (a *Lab) Counter(t lab.T, name string, labels ...string) float64 {
	t.Helper()
	v, _, err := promx.Value(a.Metrics, name, labels...)
	require.NoError(t, err)
	return v // 0 when no sample matches yet
}

// Sample is one request of a load loop.
type Sample struct {
	Sent, Recv time.Time
	Status     int
	Err        error
}

// Hammer sends n GET requests to path from c goroutines.
func (a *Lab) Hammer(path string, n, c int) []Sample {
	out := make([]Sample, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	done := make(chan struct{})
	for range c {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				s := Sample{Sent: time.Now()}
				r, err := a.Send(context.Background(), lab.Req{Method: "GET", Path: path})
				s.Recv, s.Status, s.Err = time.Now(), r.Status, err
				out[i] = s
			}
		}()
	}
	for range c {
		<-done
	}
	return out
}

// Statuses counts the status codes of samples (transport errors as 0).
func Statuses(ss []Sample) map[int]int {
	m := map[int]int{}
	for _, s := range ss {
		m[s.Status]++
	}
	return m
}

// P99 is the 99th percentile of the samples' latencies.
func P99(ss []Sample) time.Duration {
	d := make([]time.Duration, len(ss))
	for i, s := range ss {
		d[i] = s.Recv.Sub(s.Sent)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[(len(d)*99+99)/100-1]
}
