package pg

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// PoolCollector exposes pgxpool statistics as Prometheus gauges/counters,
// labelled with the pool's role ("main", "stats", …).
type PoolCollector struct {
	pool  *pgxpool.Pool
	descs map[string]*prometheus.Desc
	name  string
}

// NewPoolCollector returns a collector for pool named name.
func NewPoolCollector(pool *pgxpool.Pool, name string) *PoolCollector {
	d := func(n, help string) *prometheus.Desc {
		return prometheus.NewDesc("fencelab_db_pool_"+n, help, nil, prometheus.Labels{"pool": name})
	}
	return &PoolCollector{pool: pool, name: name, descs: map[string]*prometheus.Desc{
		"max":      d("max_conns", "Maximum connections the pool may open."),
		"total":    d("total_conns", "Open connections."),
		"acquired": d("acquired_conns", "Connections in use."),
		"idle":     d("idle_conns", "Idle connections."),
		"acquires": d("acquires_total", "Successful acquires."),
		"empty":    d("empty_acquires_total", "Acquires that had to wait for a connection."),
		"wait":     d("acquire_wait_seconds_total", "Time spent waiting for a connection."),
		"canceled": d("canceled_acquires_total", "Acquires canceled by their context."),
	}}
}

func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	g := func(k string, v float64) { ch <- prometheus.MustNewConstMetric(c.descs[k], prometheus.GaugeValue, v) }
	n := func(k string, v float64) { ch <- prometheus.MustNewConstMetric(c.descs[k], prometheus.CounterValue, v) }
	g("max", float64(s.MaxConns()))
	g("total", float64(s.TotalConns()))
	g("acquired", float64(s.AcquiredConns()))
	g("idle", float64(s.IdleConns()))
	n("acquires", float64(s.AcquireCount()))
	n("empty", float64(s.EmptyAcquireCount()))
	n("wait", s.AcquireDuration().Seconds())
	n("canceled", float64(s.CanceledAcquireCount()))
}
