//go:build !fencelab_nocontainer

package pgtest

import (
	"context"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// testcontainer is the harness's third choice, after a given URL and the
// local binaries: PostgreSQL in a container made by testcontainers-go
// when a Docker engine answers. It lives here, in the test harness, and
// not in pgserver, because testcontainers-go links a test framework and
// the deployable must not (pgserver runs the docker CLI for `dev`).
//
// ./test builds with the tag fencelab_nocontainer (container_off.go): it
// installs PostgreSQL itself, so its test binaries never reach this
// choice, and testcontainers-go is a fifth of every test binary's link.
var testcontainer = func(ctx context.Context, image string) (string, func(context.Context) error, error) {
	c, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithDatabase("postgres"),
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "max_connections=400"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("5432/tcp").WithStartupTimeout(60*time.Second)))
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return "", nil, err
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = c.Terminate(context.Background())
		return "", nil, err
	}
	return u, func(ctx context.Context) error { return c.Terminate(ctx) }, nil
}
