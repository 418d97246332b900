package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/idem"
)

// Idem is chapter 3's library as a module: its invariants, its metrics and
// the retention purge, a periodic claim job (one run per slot across all
// processes). Modules build their own Keys with idem.New.
func Idem() app.Module {
	return app.Module{
		Name: "idem", Chapter: "idem",
		Invariants:  idem.Invariants,
		Experiments: IdemExperiments,
		Build: func(d app.Deps) (app.Runtime, error) {
			if d.Metrics != nil {
				for _, c := range idem.Collectors() {
					if err := d.Metrics.Register(c); err != nil {
						return app.Runtime{}, fmt.Errorf("idem: register metrics: %w", err)
					}
				}
			}
			retention := idem.DefaultRetention
			r := app.NewSettingsReader(d.Config, "idem")
			r.Duration("FENCELAB_IDEM_RETENTION", &retention, time.Minute, 366*24*time.Hour)
			if err := r.Err(); err != nil {
				return app.Runtime{}, err
			}
			return app.Runtime{
				Kinds: []claim.Kind{{Name: "idem.purge", Every: min(retention/24, 10*time.Minute),
					Handle: func(ctx context.Context, j *claim.Job) error {
						n, err := idem.Purge(ctx, d.Pool, retention)
						if err == nil {
							err = j.SetResult(map[string]int64{"deleted": n})
						}
						return err
					}}},
			}, nil
		},
	}
}
