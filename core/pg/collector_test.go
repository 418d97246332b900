package pg_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

type lagRow struct {
	name string
	lag  int64
}

// A RowsCollector sends one series per row read on scrape, labelled by the
// row; once its read fails it sends its up gauges at 0 and no rows — a
// failed scrape never looks like "no lag".
func TestRowsCollectorSendsEachRowAndFailsVisibly(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	c := pg.NewRowsCollector(pg.RowsCollectorOptions[lagRow]{
		Name:    "test_rows",
		UpName:  "fencelab_test_status_up",
		UpHelp:  "1 if the test query succeeded.",
		Label:   "consumer",
		LabelOf: func(r lagRow) string { return r.name },
		Read: func(ctx context.Context) ([]lagRow, error) {
			rows, err := pool.Query(ctx, `SELECT name, lag FROM (VALUES ('a', 3::bigint), ('b', 0)) v(name, lag) ORDER BY name`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []lagRow
			for rows.Next() {
				var r lagRow
				if err := rows.Scan(&r.name, &r.lag); err != nil {
					return nil, err
				}
				out = append(out, r)
			}
			return out, rows.Err()
		},
		Series: []pg.RowSeries[lagRow]{{Name: "fencelab_test_lag_events", Help: "Events behind.", Type: prometheus.GaugeValue,
			Value: func(r lagRow) float64 { return float64(r.lag) }}},
	})
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	// gather is every sample by "name{label=value}".
	gather := func() map[string]float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				key := mf.GetName()
				for _, l := range m.GetLabel() {
					key += "{" + l.GetName() + "=" + l.GetValue() + "}"
				}
				out[key] = m.GetGauge().GetValue()
			}
		}
		return out
	}

	require.Equal(t, map[string]float64{
		"fencelab_test_lag_events{consumer=a}":       3,
		"fencelab_test_lag_events{consumer=b}":       0,
		"fencelab_test_status_up":                    1,
		"fencelab_collector_up{collector=test_rows}": 1,
	}, gather())

	pool.Close()
	require.Equal(t, map[string]float64{
		"fencelab_test_status_up":                    0,
		"fencelab_collector_up{collector=test_rows}": 0,
	}, gather(), "a closed pool fails the read: no rows, both up gauges at 0")
}
