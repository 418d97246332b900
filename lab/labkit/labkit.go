// Package labkit is what several chapters' kits do alike: a piece of an
// experiment written once for the chapters that share it.
package labkit

import (
	"context"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/rel"
)

// People is the relations service (services/social/rel) built beside app
// a (labenv.Deps), with a public profile for each of users: the people the
// social chapters' runs follow, post and like as.
func People(t lab.T, a *lab.App, users ...string) *rel.Service {
	t.Helper()
	svc, err := rel.NewService(labenv.Deps(a))
	require.NoError(t, err)
	for _, u := range users {
		_, err := svc.SetProfile(context.Background(), u, false)
		require.NoError(t, err)
	}
	return svc
}

// Pool opens a pool on db for the experiment's own statements, closed when
// t ends.
func Pool(t lab.T, db string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), db)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// SendPastOverload sends req as a client of a crowd does: a 503 overloaded
// with a Retry-After is the admission limiter shedding the request before
// it reached the handler, so the client sends the same request again, as
// the contract says, until it gets the handler's own answer (or a
// transport error). It returns that answer and how many 503s came before.
func SendPastOverload(ctx context.Context, a *lab.App, req lab.Req) (r lab.Response, overloads int, err error) {
	for {
		r, err = a.Send(ctx, req)
		if err != nil || r.Status != http.StatusServiceUnavailable || r.Code() != "overloaded" || r.Header.Get("Retry-After") == "" {
			return r, overloads, err
		}
		overloads++
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) // a crowd more impatient than Retry-After
	}
}
