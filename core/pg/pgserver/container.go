package pgserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ContainerImage is the image used when no local binaries exist.
const ContainerImage = "postgres:16-alpine"

// The container is run with the docker CLI rather than a container
// library: the deployable provisions with this package (`dev`, `bench`,
// the lab), and testcontainers-go brings a test framework into the binary
// with it.

// dockerAnswers reports whether a Docker engine responds within two seconds.
func dockerAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").Run() == nil
}

// startContainer runs PostgreSQL in a container (the third choice): a
// random port on loopback, removed by Stop.
func startContainer(ctx context.Context) (*Server, error) {
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	password := hex.EncodeToString(pw)
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--rm",
		"-p", "127.0.0.1::5432", "-e", "POSTGRES_PASSWORD="+password, "-e", "POSTGRES_DB=postgres",
		ContainerImage, "postgres", "-c", "fsync=off", "-c", "max_connections=400").Output()
	if err != nil {
		return nil, fmt.Errorf("pgserver: container: docker run: %w", exitDetail(err))
	}
	id := strings.TrimSpace(string(out))
	remove := func(context.Context) error {
		return exec.Command("docker", "rm", "-f", id).Run()
	}
	port, err := exec.CommandContext(ctx, "docker", "port", id, "5432/tcp").Output()
	if err != nil {
		_ = remove(ctx)
		return nil, fmt.Errorf("pgserver: container port: %w", exitDetail(err))
	}
	hostPort := strings.TrimSpace(strings.SplitN(string(port), "\n", 2)[0])
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		_ = remove(ctx)
		return nil, fmt.Errorf("pgserver: container port %q: %w", hostPort, err)
	}
	s, err := fromURL(fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", password, hostPort))
	if err != nil {
		_ = remove(ctx)
		return nil, err
	}
	// Ready is "accepts a connection": the image restarts the server once
	// after initdb, so a listening port alone is not enough.
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.URL(""))
		if err == nil {
			err = conn.Ping(cctx)
			_ = conn.Close(cctx)
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = remove(ctx)
			return nil, fmt.Errorf("pgserver: container did not accept connections: %w", err)
		}
		time.Sleep(250 * time.Millisecond) // polling an observable state (the server accepting), not a boundary
	}
	s.Strategy = Container
	s.terminate = remove
	return s, nil
}

func exitDetail(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
