package upload

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
)

// Module is upload: chunked upload: sessions, chunks, content-addressed blobs.
func Module() app.Module {
	return app.Module{
		Name: "upload", Chapter: "upload",
		Invariants: Invariants, Errors: Errors,
		Build: app.BuildService(LoadConfig, newLocalService, runtime),
	}
}

// newLocalService is the module's service over the local blob store under
// Config.Dir.
func newLocalService(d app.Deps, cfg Config) (*Service, error) {
	store, err := NewLocalStore(cfg.Dir)
	if err != nil {
		return nil, err
	}
	return NewService(d, cfg, store)
}

// runtime is the module's part of a process: the routes, and two job
// kinds — processing (one job per committed file) and GC (periodic).
func runtime(d app.Deps, cfg Config, svc *Service) (app.Runtime, error) {
	h := &handlers{svc: svc, cfg: cfg}
	return app.Runtime{
		Routes:            func(e *echo.Echo) { routes(e, h, d.Auth) },
		LargeBodyPrefixes: []string{largeBodyPrefix},
		Kinds: []claim.Kind{
			// Publishing commits with the fenced completion: re-running a
			// lapsed run is safe, so no SideEffects.
			// A file records the run that published it (UP-F3): the job
			// lives as long as the file (docs/DATA.md).
			{Name: KindProcess, Handle: svc.process, KeepFinished: true},
			{Name: kindGC, Every: cfg.GCInterval, Handle: svc.runGC},
		},
	}, nil
}

// NewService builds the service from the shared dependencies, its
// settings (LoadConfig) and the blob store it publishes to.
func NewService(d app.Deps, cfg Config, store blobStore) (*Service, error) {
	s := &Service{db: d.Pool, jobs: d.Jobs, store: store, cfg: cfg, faults: d.Faults, log: d.Logger().With("module", "upload"),
		m: newMetrics(d.Registerer())}
	s.bufs.New = func() any { b := make([]byte, bufSize); return &b }
	return s, nil
}
