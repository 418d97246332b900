package shortlink_test

import (
	"context"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/shortlink"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// opts start one replica of the app.
type opts struct {
	tasks    bool              // run the click writer and the listener
	dbURL    string            // share another replica's database
	settings map[string]string // shortlink settings (FENCELAB_SHORTLINK_*)
}

// start runs a replica whose client does not follow redirects, so a visit
// returns the 302 itself.
func start(t *testing.T, o opts) *e2etest.App {
	t.Helper()
	a := e2etest.Start(t, e2etest.Options{Tasks: o.tasks, DBURL: o.dbURL, Settings: o.settings})
	a.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return a
}

func create(t *testing.T, a *e2etest.App, tok string, body any) e2etest.Response {
	t.Helper()
	return a.Do(t, e2etest.Req{Method: "POST", Path: "/shortlink/links", Token: tok, Body: body})
}

// mustCreate creates a link and returns it.
func mustCreate(t *testing.T, a *e2etest.App, tok string, req shortlink.CreateRequest) shortlink.Link {
	t.Helper()
	r := create(t, a, tok, req)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var l shortlink.Link
	r.JSON(t, &l)
	return l
}

func visit(t *testing.T, a *e2etest.App, code string) e2etest.Response {
	t.Helper()
	return a.Do(t, e2etest.Req{Method: "GET", Path: "/s/" + code})
}

func revoke(t *testing.T, a *e2etest.App, tok, code string) e2etest.Response {
	t.Helper()
	return a.Do(t, e2etest.Req{Method: "POST", Path: "/shortlink/links/" + code + "/revoke", Token: tok})
}

func stats(t *testing.T, a *e2etest.App, tok, code string) shortlink.Stats {
	t.Helper()
	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/shortlink/links/" + code + "/stats", Token: tok})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var s shortlink.Stats
	r.JSON(t, &s)
	return s
}

func userToken(t *testing.T, a *e2etest.App, sub string) string {
	return a.Token(t, sub, httpx.RoleUser)
}

// counter sums the samples of a counter family in a replica's registry
// whose labels include the given pairs.
func counter(t *testing.T, a *e2etest.App, name string, labels ...string) float64 {
	t.Helper()
	fams, err := a.Deps.Metrics.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// sample is one request of a load loop.
type sample struct {
	sent, recv time.Time
	status     int
	err        error
}

// hammer sends n GET requests to path from c goroutines.
func hammer(a *e2etest.App, path string, n, c int) []sample {
	out := make([]sample, n)
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
				s := sample{sent: time.Now()}
				r, err := a.Send(context.Background(), e2etest.Req{Method: "GET", Path: path})
				s.recv, s.status, s.err = time.Now(), r.Status, err
				out[i] = s
			}
		}()
	}
	for range c {
		<-done
	}
	return out
}

// statuses counts the status codes of samples (transport errors as 0).
func statuses(ss []sample) map[int]int {
	m := map[int]int{}
	for _, s := range ss {
		m[s.status]++
	}
	return m
}

// p99 of the samples' latencies.
func p99(ss []sample) time.Duration {
	d := make([]time.Duration, len(ss))
	for i, s := range ss {
		d[i] = s.recv.Sub(s.sent)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[(len(d)*99+99)/100-1]
}
