package shortlink

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// BenchmarkRedirect drives the echo instance `serve` builds (app.Build and
// Process.HTTP: error table, recovery, request id, metrics, URL check,
// body deadline and limit, admission, and the access log when on) with a
// cache-hit GET /s/{code} and with GET /healthz, the ceiling the redirect
// is held to (issue 25: ≥ 0.95 of it). The click writer runs, so every
// click takes the real enqueue path and the queue never fills.
//
//	go test ./services/shortlink/ -run '^$' -bench Redirect -benchmem
func BenchmarkRedirect(b *testing.B) {
	for _, accessLog := range []bool{false, true} {
		name := "access_log=off"
		if accessLog {
			name = "access_log=on"
		}
		b.Run(name, func(b *testing.B) {
			e, code := benchServer(b, accessLog)
			for _, path := range []string{"/healthz", "/s/" + code} {
				route := "healthz"
				if path != "/healthz" {
					route = "redirect"
				}
				b.Run(route, func(b *testing.B) {
					want := http.StatusOK
					if route == "redirect" {
						want = http.StatusFound
					}
					tmpl, err := http.NewRequest(http.MethodGet, "http://bench.test"+path, nil)
					require.NoError(b, err)
					w := &discardWriter{h: http.Header{}}
					serveOnce(e, tmpl, w) // warm the cache and the pools
					require.Equal(b, want, w.status)
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						serveOnce(e, tmpl, w)
					}
					b.StopTimer()
					require.Equal(b, want, w.status)
				})
			}
		})
	}
}

// serveOnce serves a fresh copy of tmpl (net/http hands every request its
// own header map; the request-id middleware writes into it).
func serveOnce(e *echo.Echo, tmpl *http.Request, w *discardWriter) {
	r := *tmpl
	r.Header = make(http.Header, 2)
	clear(w.h)
	w.status = 0
	e.ServeHTTP(w, &r)
}

// discardWriter is a ResponseWriter that keeps only the status, so the
// figures are the server's, not a recorder's.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }

// benchServer builds the process with this module on a fresh database,
// runs its background tasks for the benchmark's life and creates one link.
func benchServer(b *testing.B, accessLog bool) (*echo.Echo, string) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := app.Defaults()
	cfg.DatabaseURL = pgtest.URL(b)
	cfg.AccessLog = accessLog
	cfg.TokenSecret = "bench-secret-0123456789abcdef"
	// Access-log lines are formatted as in production and discarded, so
	// the figure is the logging work, not the terminal's.
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p, err := app.Build(ctx, cfg, []app.Module{Module()}, app.BuildOptions{Role: "bench-redirect", Log: log})
	require.NoError(b, err)
	wait := p.Background(ctx)
	b.Cleanup(func() { cancel(); wait(); p.Close() })
	const code = "Bench123"
	_, created, err := createLink(ctx, p.Deps.Pool, code, "https://book.example.test/chapters/short-links", "user-0042", false, nil)
	require.NoError(b, err)
	require.True(b, created)
	return p.HTTP(), code
}
