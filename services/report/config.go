package report

import (
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/app"
)

// Config tunes one instance's report job. The environment sets it for
// `serve` and `worker` (see loadConfig) so process experiments can drive
// the job.
type Config struct {
	// Holder is this instance's identity in the lease (FENCELAB_REPORT_HOLDER;
	// default host-pid). Two instances must not share one.
	Holder string
	// TTL of the report lease (FENCELAB_REPORT_TTL, default 30s).
	TTL time.Duration
	// Interval between the task's looks at the day's report
	// (FENCELAB_REPORT_INTERVAL, default 1m).
	Interval time.Duration
	// Date pins the day the task reports on (FENCELAB_REPORT_DATE,
	// YYYY-MM-DD); zero means today by the database clock.
	Date time.Time
	// Retention is how long a report day is kept after its lease's latest
	// grant and its expiry (FENCELAB_REPORT_RETENTION, default 400 days;
	// between minRetention and maxRetention). report.purge then deletes
	// the day whole: its lease with every grant, its writes, its report
	// and its fence guard (Purge). It is also the longest a paused holder
	// may stay paused and still be refused (see sqlPurge).
	Retention time.Duration
	// Output is where reports go; nil means the fenced report_output table.
	// Only the experiments set it.
	Output Output
}

// Defaults for Config.
const (
	defaultTTL      = 30 * time.Second
	defaultInterval = time.Minute
	minInterval     = 10 * time.Millisecond

	defaultRetention = 400 * 24 * time.Hour
	// minRetention keeps the purge far from any lease still in play: a
	// day's lease expires at most lease.MaxTTL after its last grant or
	// renewal, and its fence restarts at 1 once the day is purged, so the
	// retention is also how long a paused holder can stay paused and still
	// be refused (sqlPurge).
	minRetention = 7 * 24 * time.Hour
	maxRetention = 10 * 365 * 24 * time.Hour
)

// envRetention is Config.Retention's setting.
const envRetention = "FENCELAB_REPORT_RETENTION"

// loadConfig reads the job's configuration through ac.Lookup: per-app
// settings in tests, the environment in `serve` and `worker`.
func loadConfig(ac app.Config) (Config, error) {
	c := Config{Holder: defaultHolder(), TTL: defaultTTL, Interval: defaultInterval, Retention: defaultRetention}
	r := app.NewSettingsReader(ac, "report")
	r.String("FENCELAB_REPORT_HOLDER", &c.Holder, nil)
	r.Duration("FENCELAB_REPORT_TTL", &c.TTL, time.Millisecond, 24*time.Hour)
	r.Duration("FENCELAB_REPORT_INTERVAL", &c.Interval, minInterval, 24*time.Hour)
	r.Duration(envRetention, &c.Retention, minRetention, maxRetention)
	var date string
	r.String("FENCELAB_REPORT_DATE", &date, nil)
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	if date != "" {
		d, err := ParseDate(date)
		if err != nil {
			return Config{}, fmt.Errorf("report: FENCELAB_REPORT_DATE: %w", err)
		}
		c.Date = d
	}
	return c, nil
}
