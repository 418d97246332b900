package report

import (
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/app"
)

// Config tunes one instance's report job. The environment sets it for
// `serve` and `worker` (see LoadConfig) so process experiments can drive
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
	// Output is where reports go; nil means the fenced report_output table.
	// Only the experiments set it.
	Output Output
}

// Defaults for Config.
const (
	DefaultTTL      = 30 * time.Second
	DefaultInterval = time.Minute
	MinInterval     = 10 * time.Millisecond
)

// LoadConfig reads the job's configuration through ac.Lookup: per-app
// settings in tests, the environment in `serve` and `worker`.
func LoadConfig(ac app.Config) (Config, error) {
	c := Config{Holder: defaultHolder(), TTL: DefaultTTL, Interval: DefaultInterval}
	r := app.NewSettingsReader(ac, "report")
	r.String("FENCELAB_REPORT_HOLDER", &c.Holder, nil)
	r.Duration("FENCELAB_REPORT_TTL", &c.TTL, time.Millisecond, 24*time.Hour)
	r.Duration("FENCELAB_REPORT_INTERVAL", &c.Interval, MinInterval, 24*time.Hour)
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
