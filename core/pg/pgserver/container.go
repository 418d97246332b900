package pgserver

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// ContainerImage is the image used when no local binaries exist.
const ContainerImage = "postgres:16-alpine"

// dockerAnswers reports whether a Docker engine responds within two seconds.
func dockerAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	return p.Health(ctx) == nil
}

// startContainer runs PostgreSQL in a container (the third choice).
func startContainer(ctx context.Context) (*Server, error) {
	c, err := tcpostgres.Run(ctx, ContainerImage,
		tcpostgres.WithDatabase("postgres"),
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "max_connections=400"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("5432/tcp").WithStartupTimeout(60*time.Second)))
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return nil, fmt.Errorf("pgserver: container: %w", err)
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = c.Terminate(context.Background())
		return nil, fmt.Errorf("pgserver: container url: %w", err)
	}
	s, err := fromURL(u)
	if err != nil {
		return nil, err
	}
	s.Strategy = Container
	s.terminate = func(ctx context.Context) error { return c.Terminate(ctx) }
	return s, nil
}
