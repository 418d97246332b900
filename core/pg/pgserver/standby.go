package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// StartStandby makes a streaming standby of the local server s with
// pg_basebackup (-R writes standby.signal) and starts it on a free port.
// The standby reaches its primary at host:port — s itself, or a proxy in
// front of it that an experiment can stall — under application_name
// appName, the name synchronous_standby_names refers to. Close removes
// its data directory. Chapter 14 runs on it: a primary, a standby, a
// crash and a promotion with the local binaries alone.
func (s *Server) StartStandby(ctx context.Context, host string, port int, appName string, o Options) (*Server, error) {
	if s.Strategy != Local {
		return nil, fmt.Errorf("pgserver: a standby needs a local primary")
	}
	parent, err := os.MkdirTemp("", fmt.Sprintf("fencelab-pg-%d-", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pgserver: temp dir: %w", err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		_ = os.RemoveAll(parent)
		return nil, err
	}
	dataDir := filepath.Join(parent, "data")
	conninfo := fmt.Sprintf("host=%s port=%d user=postgres application_name=%s", host, port, appName)
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "pg_basebackup"),
		"-D", dataDir, "-d", conninfo, "-X", "stream", "-R", "-c", "fast", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = os.TempDir()
	if s.cred != nil {
		if err := os.Chown(parent, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			_ = os.RemoveAll(parent)
			return nil, err
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(parent)
		return nil, fmt.Errorf("pgserver: pg_basebackup: %w\n%s", err, out)
	}
	// -R wrote the connection it used; say it once more, last, so the
	// standby's primary and name are exactly these whatever -R kept.
	auto, err := os.OpenFile(filepath.Join(dataDir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = fmt.Fprintf(auto, "primary_conninfo = '%s'\n", conninfo)
		if cerr := auto.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		_ = os.RemoveAll(parent)
		return nil, fmt.Errorf("pgserver: standby conninfo: %w", err)
	}
	o.DataDir = dataDir
	if o.Port == 0 {
		o.Port = freePort(0)
	}
	standby, err := StartLocal(ctx, s.binDir, o)
	if err != nil {
		_ = os.RemoveAll(parent)
		return nil, err
	}
	standby.ownedDir = parent
	return standby, nil
}
