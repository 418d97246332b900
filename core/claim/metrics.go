package claim

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/promx"
)

// metrics are the claim engine's Prometheus series. Counters are per
// process; queue depth and oldest-ready age are read from the database at
// scrape time (bounded by a timeout) so every replica reports the same
// truth.
type metrics struct {
	claims        *prometheus.CounterVec
	outcomes      *prometheus.CounterVec
	stale         *prometheus.CounterVec
	recoveries    *prometheus.CounterVec
	unknowns      *prometheus.CounterVec
	resolutions   *prometheus.CounterVec
	heartbeatLost *prometheus.CounterVec
	busy          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, c *Client) *metrics {
	m := &metrics{
		claims: promx.CounterVec(reg, "fencelab_claim_claims_total",
			"Jobs claimed, by kind.", "kind"),
		outcomes: promx.CounterVec(reg, "fencelab_claim_outcomes_total",
			"Attempts finished, by kind and outcome (succeeded, retry, failed, unknown, cancelled).", "kind", "outcome"),
		stale: promx.CounterVec(reg, "fencelab_claim_stale_rejections_total",
			"Fenced writes refused because the writer's fence was stale, by kind.", "kind"),
		recoveries: promx.CounterVec(reg, "fencelab_claim_recoveries_total",
			"Expired leases recovered, by kind and the state the job went to.", "kind", "to"),
		unknowns: promx.CounterVec(reg, "fencelab_claim_unknowns_total",
			"Jobs whose outcome became unknown (marked by a handler or recovered), by kind.", "kind"),
		resolutions: promx.CounterVec(reg, "fencelab_claim_resolutions_total",
			"Unknown jobs settled, by kind and verdict (found, absent, review).", "kind", "verdict"),
		heartbeatLost: promx.CounterVec(reg, "fencelab_claim_heartbeat_losses_total",
			"Leases found lost by a heartbeat, by kind.", "kind"),
		busy: promx.Gauge(reg, "fencelab_claim_jobs_held",
			"Jobs this process holds (running or awaiting their completion write)."),
	}
	promx.Register(reg, &queueCollector{c: c, up: pg.NewCollectorUp("claim_queue", c.log)})
	return m
}

func (m *metrics) finished(kind, outcome string) { m.outcomes.WithLabelValues(kind, outcome).Inc() }

var (
	depthDesc = prometheus.NewDesc("fencelab_claim_queue_depth",
		"Live jobs by kind and state (ready, running, unknown, needs_review; finished jobs are counted by fencelab_claim_outcomes_total).", []string{"kind", "state"}, nil)
	oldestDesc = prometheus.NewDesc("fencelab_claim_oldest_ready_age_seconds",
		"Age of the oldest due ready job by kind: SKIP LOCKED is not fair, so starvation shows here.", []string{"kind"}, nil)
)

// queueCollector reads queue depth and age at scrape time. A failed
// query is reported (fencelab_collector_up{collector="claim_queue"} 0 and
// a log line), never swallowed: a silent gap reads as an empty queue.
type queueCollector struct {
	c  *Client
	up *pg.CollectorUp
}

func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- oldestDesc
	q.up.Describe(ch)
}

func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Every registered kind is reported in every counted state, zero
	// included: an idle queue shows 0 rather than no series at all (a
	// dashboard or a grep then tells "empty" from "not exported").
	type ks struct{ kind, state string }
	depth := map[ks]float64{}
	for _, k := range q.c.KindNames() {
		for _, st := range countedStates {
			depth[ks{k, st}] = 0
		}
	}
	errDepth := collectRows(ctx, q.c.pool, sqlDepth, func(r pgx.Rows) error {
		var kind, state string
		var n int64
		if err := r.Scan(&kind, &state, &n); err != nil {
			return err
		}
		depth[ks{kind, state}] = float64(n)
		return nil
	})
	for k, n := range depth {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, n, k.kind, k.state)
	}
	oldest := map[string]float64{}
	for _, k := range q.c.KindNames() {
		oldest[k] = 0
	}
	errOldest := collectRows(ctx, q.c.pool, sqlOldestReady, func(r pgx.Rows) error {
		var kind string
		var age float64
		if err := r.Scan(&kind, &age); err != nil {
			return err
		}
		oldest[kind] = age
		return nil
	})
	for k, age := range oldest {
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, k)
	}
	q.up.Report(ch, errDepth, errOldest)
}

// collectRows runs sql and hands every row to each; the first error (the
// query's, a scan's or the iteration's) is returned.
func collectRows(ctx context.Context, db pg.Querier, sql string, each func(pgx.Rows) error) error {
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return pg.MapError(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// countedStates are the states sqlDepth counts: the live ones.
var countedStates = []string{"ready", "running", "unknown", "needs_review"}
