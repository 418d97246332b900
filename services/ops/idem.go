package ops

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/idem"
)

// Idem is chapter 3's library as a module: its invariants and the
// retention purge, a periodic claim job (one run per slot across all
// processes). Modules build their own Keys with app.Deps.Keys; the series
// are registered by the first store built on the process's registry.
func Idem() app.Module {
	return app.Module{
		Name: "idem", Chapter: "idem",
		Invariants: idem.Invariants,
		Build: func(d app.Deps) (app.Runtime, error) {
			keys := d.Keys() // the purge's, counting fencelab_idem_purged_total
			retention := idem.DefaultRetention
			r := app.NewSettingsReader(d.Config, "idem")
			r.Duration("FENCELAB_IDEM_RETENTION", &retention, time.Minute, 366*24*time.Hour)
			if err := r.Err(); err != nil {
				return app.Runtime{}, err
			}
			return app.Runtime{
				Kinds: []claim.Kind{claim.RetentionKind("idem.purge", retention, func(ctx context.Context) (any, error) {
					n, err := keys.Purge(ctx, retention)
					return claim.Deleted(n), err
				})},
			}, nil
		},
	}
}
