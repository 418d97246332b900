package reserve

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/promx"
)

// LimiterName labels the admission gauges of reservation work:
// fencelab_admission_in_use{limiter="flashsale_reservations"} (admitted,
// i.e. in the database) and fencelab_admission_waiting{…} (the line).
const LimiterName = "flashsale_reservations"

// ReleaseKind is the periodic claim-engine job that returns expired holds.
const ReleaseKind = "flashsale.release"

// service is the reservation layer as the deployable runs it: the
// Inventory behind a per-process admission limiter (FS-R4), its HTTP
// routes and the release job.
type service struct {
	cfg     config
	pool    *pgxpool.Pool
	inv     *Inventory
	auth    *httpx.Auth
	log     *slog.Logger
	limiter *httpx.Limiter
	inDB    *concurrency
	m       *metrics
}

// NewService builds the reservation layer from the shared dependencies and
// its settings (LoadConfig).
func NewService(d app.Deps, cfg config) (*service, error) {
	reg := d.Registerer()
	s := &service{
		cfg: cfg, pool: d.Pool, auth: d.Auth, log: d.Logger(),
		inv: NewInventory(InventoryOptions{HoldTTL: cfg.HoldTTL, Faults: d.Faults}),
		limiter: httpx.NewLimiter(httpx.LimiterOptions{
			Name: LimiterName, Limit: cfg.Limit, WaitLine: cfg.WaitLine, MaxWait: cfg.MaxWait, Metrics: reg,
		}),
		inDB: &concurrency{},
	}
	s.m = newMetrics(reg, s.inDB)
	return s, nil
}

// Inventory is the stock rules, for the layers built on reservations.
func (s *service) Inventory() *Inventory { return s.inv }

// Routes mounts the reservation routes.
func (s *service) Routes(e *echo.Echo) { routes(e, &handlers{svc: s}, s.auth) }

// Kinds are the layer's claim-engine job kinds.
func (s *service) Kinds() []claim.Kind {
	return []claim.Kind{{Name: ReleaseKind, Every: s.cfg.ReleaseEvery, Handle: s.releaseJob}}
}

// reserveHold holds a unit for h.UserID (Inventory.Hold) once the request is
// admitted: at most Limit of these run in the database at once, WaitLine
// more wait, and the rest are refused at once with 503 (FS-R4). The
// request is validated before it queues, so a bad one costs no place in
// line. A caller that leaves while waiting gives its place up; one that
// leaves during the hold gets the whole hold or none of it (Hold).
func (s *service) reserveHold(ctx context.Context, h HoldRequest) (Reservation, bool, error) {
	if err := h.Validate(); err != nil {
		s.m.outcome(err)
		return Reservation{}, false, err
	}
	release, err := s.limiter.Acquire(ctx)
	if err != nil {
		s.m.outcome(err)
		return Reservation{}, false, err
	}
	defer release()
	leave := s.inDB.enter()
	defer leave()
	r, created, err := s.inv.Hold(ctx, s.pool, h)
	switch {
	case err != nil:
		s.m.outcome(err)
	case created:
		s.m.outcomes.WithLabelValues("held").Inc()
	default:
		s.m.outcomes.WithLabelValues("replayed").Inc()
	}
	return r, created, err
}

// getOwned reads a reservation for p: its owner or an admin.
func (s *service) getOwned(ctx context.Context, p httpx.Principal, id int64) (Reservation, error) {
	r, err := s.inv.Get(ctx, s.pool, id)
	if err != nil {
		return Reservation{}, err
	}
	if !p.CanActFor(r.UserID) {
		return Reservation{}, errNotOwner
	}
	return r, nil
}

// stockOf reads a SKU's counts.
func (s *service) stockOf(ctx context.Context, sku string) (Stock, error) {
	return s.inv.stockOf(ctx, s.pool, sku)
}

// releaseDue runs the release once (the admin route and the job).
func (s *service) releaseDue(ctx context.Context) (int, error) {
	n, err := s.inv.releaseDue(ctx, s.pool, s.cfg.ReleaseBatch)
	s.m.released.Add(float64(n))
	return n, err
}

// releaseJob is the periodic job. Each batch commits on its own and may
// be re-run by anyone at any time without returning a unit twice (FS-R5),
// so the job's completion need not share a transaction with the batches:
// a run whose lease was lost releases nothing that another run did.
func (s *service) releaseJob(ctx context.Context, j *claim.Job) error {
	n, err := s.releaseDue(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Info("flashsale: released expired holds", "released", n)
	}
	return j.SetResult(map[string]int{"released": n})
}

// Admission is a snapshot of the limiter and of the measured database
// concurrency, for experiments and benchmarks.
type Admission struct {
	Limit    int `json:"limit"`
	WaitLine int `json:"wait_line"`
	InUse    int `json:"in_use"`  // admitted now
	Waiting  int `json:"waiting"` // in line now
	// PeakInDB is the most reservation operations ever seen inside the
	// database at once, counted around the database work itself rather
	// than by the limiter: the measurement FS-R4 is checked against.
	PeakInDB int `json:"peak_in_db"`
	InDB     int `json:"in_db"`
}

// admissionState reports the admission state now.
func (s *service) admissionState() Admission {
	now, peak := s.inDB.read()
	return Admission{Limit: s.cfg.Limit, WaitLine: s.cfg.WaitLine, InUse: s.limiter.InUse(),
		Waiting: s.limiter.Waiting(), InDB: now, PeakInDB: peak}
}

// concurrency counts operations in a section and remembers the peak.
type concurrency struct {
	mu        sync.Mutex
	now, peak int
}

func (c *concurrency) enter() (leave func()) {
	c.mu.Lock()
	c.now++
	c.peak = max(c.peak, c.now)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.now--
		c.mu.Unlock()
	}
}

func (c *concurrency) read() (now, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now, c.peak
}

type metrics struct {
	outcomes *prometheus.CounterVec
	released prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, inDB *concurrency) *metrics {
	m := &metrics{
		outcomes: promx.CounterVec(reg, "fencelab_flashsale_reservation_requests_total",
			"Reservation requests by outcome (held, replayed, sold_out, already_holding, overloaded, …).", "outcome"),
		released: promx.Counter(reg, "fencelab_flashsale_released_total",
			"Expired holds whose unit the release returned."),
	}
	promx.GaugeFunc(reg, "fencelab_flashsale_reservation_ops_in_db",
		"Reservation operations inside the database now (FS-R4: at most FENCELAB_FLASHSALE_LIMIT).",
		func() float64 { n, _ := inDB.read(); return float64(n) })
	promx.GaugeFunc(reg, "fencelab_flashsale_reservation_ops_in_db_peak",
		"Most reservation operations ever inside the database at once in this process.",
		func() float64 { _, p := inDB.read(); return float64(p) })
	return m
}

// problems answers the layer's own errors, for the outcome label (the
// process's table answers the same for these sentinels).
var problems = httpx.NewErrors(Errors)

// outcome counts a refused or failed request by its problem code.
func (m *metrics) outcome(err error) {
	code := "error"
	switch p := problems.Problem(err); {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		code = "client_left"
	case p.Status < 500 || p.Code == "overloaded":
		code = p.Code
	}
	m.outcomes.WithLabelValues(code).Inc()
}
