package setup

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/fencelab/fencelab/core/app"
)

// InProcess is the deployable built inside the bench's own process (every
// module, every middleware) and serving HTTP on a loopback listener, for a
// bench whose load generator shares the process with the server.
type InProcess struct {
	*app.Process
	Base           string // http://ADDR
	hs             *http.Server
	stopBackground func()
}

// InProcessOptions tune StartInProcess.
type InProcessOptions struct {
	// Build is passed to app.Build; a nil Log becomes ErrorLog().
	Build app.BuildOptions
	// Wrap, when set, wraps the process's handler (a bench's own timing).
	Wrap func(http.Handler) http.Handler
	// IdleTimeout is the server's keep-alive limit (0: none).
	IdleTimeout time.Duration
}

// ErrorLog is the logger a bench gives its process: errors only, on
// stderr, so the bench's own output stays readable.
func ErrorLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// StartInProcess builds the process from cfg (with a fresh token secret
// when it has none: the bench mints its own tokens) and mods, and serves
// its HTTP handler on a free loopback port. Background tasks are not
// started (StartBackground); Close ends everything.
func StartInProcess(ctx context.Context, cfg app.Config, mods []app.Module, o InProcessOptions) (*InProcess, error) {
	if cfg.TokenSecret == "" {
		cfg.TokenSecret = rand.Text()
	}
	if o.Build.Log == nil {
		o.Build.Log = ErrorLog()
	}
	p, err := app.Build(ctx, cfg, mods, o.Build)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.Close()
		return nil, err
	}
	h := http.Handler(p.HTTP())
	if o.Wrap != nil {
		h = o.Wrap(h)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: o.IdleTimeout}
	go func() { _ = hs.Serve(ln) }()
	return &InProcess{Process: p, Base: "http://" + ln.Addr().String(), hs: hs, stopBackground: func() {}}, nil
}

// StartBackground runs what `serve` runs beside HTTP (every module's tasks
// and the claim engine) until StopBackground or Close.
func (s *InProcess) StartBackground() {
	s.StopBackground()
	ctx, cancel := context.WithCancel(context.Background())
	wait := s.Background(ctx)
	s.stopBackground = func() { cancel(); wait() }
}

// StopBackground stops the background tasks and waits for them; it does
// nothing when they are not running.
func (s *InProcess) StopBackground() {
	s.stopBackground()
	s.stopBackground = func() {}
}

// Close stops the background tasks, the HTTP server and the process.
func (s *InProcess) Close() {
	s.StopBackground()
	_ = s.hs.Close()
	s.Process.Close()
}
