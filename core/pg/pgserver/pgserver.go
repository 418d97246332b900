// Package pgserver provisions a PostgreSQL server for `fencelab dev` and for
// the test harness, in the order the spec fixes: a given URL, else the local
// PostgreSQL binaries (run as the `postgres` user when we are root, because
// PostgreSQL refuses to run as root), else a container when a Docker engine
// answers (the docker CLI; the test harness passes testcontainers-go as
// Options.Container), else an error that says what to install
// (`dev` may install it first: DecideInstall).
package pgserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Strategy is how a server is obtained.
type Strategy string

const (
	FromURL   Strategy = "url"
	Local     Strategy = "local"
	Container Strategy = "container"
)

// ErrNoPostgres is returned when no strategy is available.
var ErrNoPostgres = errors.New(`pgserver: no PostgreSQL available: set DATABASE_URL, ` +
	`or install the server binaries (Debian/Ubuntu: apt-get install postgresql; ` +
	`initdb and pg_ctl must be on PATH or under /usr/lib/postgresql/*/bin), ` +
	`or start a Docker engine (the docker CLI runs a container)`)

// Env is what Choose looks at; tests fill it by hand to cover every branch.
type Env struct {
	URL          string // a given database URL
	BinDir       string // directory holding initdb and postgres, "" if none found
	DockerAnswer bool   // a Docker engine answered
}

// Choose applies the spec's order. It is pure so the choice is unit-tested
// even on machines without Docker.
func Choose(e Env) (Strategy, error) {
	switch {
	case e.URL != "":
		return FromURL, nil
	case e.BinDir != "":
		return Local, nil
	case e.DockerAnswer:
		return Container, nil
	}
	return "", ErrNoPostgres
}

// DetectEnv fills Env from the machine. Docker is only probed when nothing
// cheaper is available, because the probe can take a moment.
func DetectEnv(ctx context.Context, givenURL string) Env {
	e := Env{URL: givenURL}
	if e.URL != "" {
		return e
	}
	e.BinDir = FindBinDir()
	if e.BinDir == "" {
		e.DockerAnswer = dockerAnswers(ctx)
	}
	return e
}

// FindBinDir finds a directory holding initdb and postgres: PATH first, then
// the newest <SearchRoot>/*/bin.
func FindBinDir() string { return findBinDir(exec.LookPath, SearchRoot()) }

// SearchRootEnv names the directory whose */bin subdirectories are searched
// for the server binaries after PATH (default /usr/lib/postgresql, where
// Debian and Ubuntu put them). Pointing it, and PATH, at an empty directory
// makes a machine look as if it had no PostgreSQL, which is how the
// no-server paths are tested through the real binary.
const SearchRootEnv = "FENCELAB_PG_SEARCH_ROOT"

// SearchRoot is the directory FindBinDir searches after PATH.
func SearchRoot() string {
	if d := os.Getenv(SearchRootEnv); d != "" {
		return d
	}
	return "/usr/lib/postgresql"
}

// findBinDir is FindBinDir with the PATH lookup and the search root given,
// so its choices are unit-tested against fake directories.
func findBinDir(lookPath func(string) (string, error), root string) string {
	if p, err := lookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			dir = filepath.Dir(resolved)
		}
		if isExec(filepath.Join(dir, "postgres")) {
			return dir
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "bin"))
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Options for a local server.
type Options struct {
	// DataDir is kept across runs when set (dev); when empty a temporary
	// directory is made and removed by Stop (tests).
	DataDir string
	// Port to listen on (127.0.0.1); 0 picks a free one, preferring
	// PreferredPort when it is free.
	Port          int
	PreferredPort int
	// Ephemeral turns off durability (fsync, full page writes, synchronous
	// commit) for throwaway test clusters. Benchmarks must not set it.
	Ephemeral bool
	// MaxConnections for the server; 0 means 400, enough for parallel tests
	// and a few hundred concurrent HTTP clients behind bounded pools.
	MaxConnections int
	// Log receives the server's stderr; nil writes it to <parent>/postgres.log.
	Log io.Writer
	// Container starts the third choice, a PostgreSQL container, and
	// returns its superuser URL and how to remove it. nil runs it with the
	// docker CLI. The test harness (pgtest) passes testcontainers-go here:
	// it is the field's tool for tests, but it carries a test framework,
	// so the deployable (dev, bench, the lab) never links it.
	Container func(ctx context.Context, image string) (url string, terminate func(context.Context) error, err error)
	// Seed prepares what every throwaway cluster made from the initdb
	// cache starts with (the test harness: its role and migrated template
	// database). It runs once per SeedKey on a server over a copy of the
	// cache, and that cluster, stopped, is cached beside it; later
	// clusters are copies of it. Only for Ephemeral servers with no
	// DataDir; SeedKey must change whenever what Seed makes would.
	Seed    func(ctx context.Context, s *Server) error
	SeedKey string
}

// Server is a running PostgreSQL.
type Server struct {
	Strategy Strategy
	Host     string
	Port     int
	User     string
	Password string

	url       string
	binDir    string
	dataDir   string
	ownedDir  string // removed on Stop when we made it
	opts      Options
	cred      *syscall.Credential
	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	logFile   *os.File
	terminate func(context.Context) error // container
}

// URL returns a superuser connection URL for database db ("postgres" if empty).
func (s *Server) URL(db string) string {
	if s.url != "" && db == "" {
		return s.url
	}
	if db == "" {
		db = "postgres"
	}
	if s.url != "" {
		u, err := url.Parse(s.url)
		if err == nil {
			u.Path = "/" + db
			return u.String()
		}
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Path: "/" + db}
	if s.Password != "" {
		u.User = url.UserPassword(s.User, s.Password)
	} else {
		u.User = url.User(s.User)
	}
	u.RawQuery = "sslmode=disable"
	return u.String()
}

// Exec runs one statement on the server over a connection of its own, to
// the database URL("") names: CREATE and DROP DATABASE cannot run in a
// transaction, nor on the database they name.
func (s *Server) Exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL(""))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// DataDir is the cluster's data directory (local servers only).
func (s *Server) DataDir() string { return s.dataDir }

// Provision returns a server by the spec's order. givenURL wins; otherwise a
// local cluster with o, otherwise a container.
func Provision(ctx context.Context, givenURL string, o Options) (*Server, error) {
	env := DetectEnv(ctx, givenURL)
	st, err := Choose(env)
	if err != nil {
		return nil, err
	}
	switch st {
	case FromURL:
		return fromURL(givenURL)
	case Local:
		return StartLocal(ctx, env.BinDir, o)
	default:
		if o.Container != nil {
			return adoptContainer(ctx, o.Container)
		}
		return startContainer(ctx)
	}
}

// adoptContainer runs start (Options.Container) and wraps its server.
func adoptContainer(ctx context.Context, start func(context.Context, string) (string, func(context.Context) error, error)) (*Server, error) {
	u, terminate, err := start(ctx, ContainerImage)
	if err != nil {
		return nil, fmt.Errorf("pgserver: container: %w", err)
	}
	s, err := fromURL(u)
	if err != nil {
		_ = terminate(context.Background())
		return nil, err
	}
	s.Strategy = Container
	s.terminate = terminate
	return s, nil
}

func fromURL(raw string) (*Server, error) {
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("pgserver: parse database url: %w", err)
	}
	return &Server{Strategy: FromURL, url: raw, Host: cfg.Host, Port: int(cfg.Port), User: cfg.User, Password: cfg.Password}, nil
}

// StartLocal initialises (if needed) and starts a cluster from binDir.
func StartLocal(ctx context.Context, binDir string, o Options) (*Server, error) {
	if binDir == "" {
		binDir = FindBinDir()
		if binDir == "" {
			return nil, ErrNoPostgres
		}
	}
	s := &Server{Strategy: Local, Host: "127.0.0.1", User: "postgres", binDir: binDir, opts: o}
	cred, err := runAsCredential()
	if err != nil {
		return nil, err
	}
	s.cred = cred
	if o.DataDir == "" {
		reapStale()
		// A 0755 parent under the system temp dir, so that the postgres user
		// can traverse it (t.TempDir() is 0700 and root-owned).
		parent, err := os.MkdirTemp("", fmt.Sprintf("fencelab-pg-%d-", os.Getpid()))
		if err != nil {
			return nil, fmt.Errorf("pgserver: temp dir: %w", err)
		}
		if err := os.Chmod(parent, 0o755); err != nil {
			return nil, err
		}
		s.ownedDir = parent
		s.dataDir = filepath.Join(parent, "data")
	} else {
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return nil, err
		}
		s.dataDir = abs
	}
	// The port is chosen first: a Seed runs on it (see seededCache).
	s.Port = o.Port
	if s.Port == 0 {
		s.Port = freePort(o.PreferredPort)
	}
	if err := s.initdb(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

// runAsCredential returns the postgres user's credential when we are root.
func runAsCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root, and PostgreSQL refuses root: "+
			"create a 'postgres' OS user (apt-get install postgresql does): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Server) chown(p string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(p, int(s.cred.Uid), int(s.cred.Gid))
}

func (s *Server) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err == nil {
		return nil // reuse an existing cluster (dev keeps its data)
	}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return fmt.Errorf("pgserver: data dir: %w", err)
	}
	if err := s.chown(s.dataDir); err != nil {
		return fmt.Errorf("pgserver: chown data dir: %w", err)
	}
	if s.cred != nil {
		if err := traversable(filepath.Dir(s.dataDir)); err != nil {
			return err
		}
	}
	if s.opts.Ephemeral && s.ownedDir != "" {
		return s.initdbFromCache(ctx)
	}
	return s.runInitdb(ctx, s.dataDir)
}

func (s *Server) runInitdb(ctx context.Context, dataDir string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"),
		"-D", dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: initdb %s: %w\n%s", dataDir, err, out)
	}
	return nil
}

// initdbFromCache fills a throwaway server's data directory with a copy of
// a freshly initialised cluster kept under the temp dir, one per initdb
// binary. A full test run starts some fifty throwaway servers, and initdb
// costs each of them a second and a half of CPU; a copy costs a tenth of
// that. With Options.Seed the copy is of the seeded cluster cached beside
// it (see seed).
func (s *Server) initdbFromCache(ctx context.Context) error {
	st, err := os.Stat(filepath.Join(s.binDir, "initdb"))
	if err != nil {
		return fmt.Errorf("pgserver: initdb: %w", err)
	}
	key := fmt.Sprintf("%s|%d|%d|%d", s.binDir, st.Size(), st.ModTime().UnixNano(), os.Geteuid())
	cache := filepath.Join(os.TempDir(), fmt.Sprintf("fencelab-initdb-%x", sha256.Sum256([]byte(key)))[:len("fencelab-initdb-")+16])
	if err := s.cached(cache, func(data string) error { return s.runInitdb(ctx, data) }); err != nil {
		return err
	}
	if s.opts.Seed != nil {
		base := cache
		sum := sha256.Sum256([]byte(s.opts.SeedKey))
		cache = fmt.Sprintf("%s-seed-%x", base, sum[:8])
		seeded := cache
		err := s.cached(seeded, func(data string) error {
			pruneSeeds(base, seeded) // a new seed: the old ones may go
			return s.seed(ctx, base, data)
		})
		if err != nil {
			return err
		}
	}
	return copyCluster(ctx, cache, s.dataDir)
}

// cached makes cache (a directory holding a cluster's data/) with fill
// unless it exists. It is made whole under a temporary name and renamed
// into place, so a reader never copies a half-written one; it is never
// written again, and its name keeps it clear of reapStale.
func (s *Server) cached(cache string, fill func(data string) error) error {
	if _, err := os.Stat(filepath.Join(cache, "data", "PG_VERSION")); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp("", "fencelab-initdb-new-")
	if err != nil {
		return fmt.Errorf("pgserver: temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	data := filepath.Join(tmp, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	if err := s.chown(data); err != nil {
		return fmt.Errorf("pgserver: chown data dir: %w", err)
	}
	if err := fill(data); err != nil {
		return err
	}
	// Another process may have won the race: its cache is as good.
	if err := os.Rename(tmp, cache); err != nil {
		if _, serr := os.Stat(filepath.Join(cache, "data", "PG_VERSION")); serr != nil {
			return fmt.Errorf("pgserver: cache %s: %w", cache, err)
		}
	}
	return nil
}

// copyCluster copies a cached cluster's data directory into dst; cp -a
// keeps the owner (postgres) and modes (0700) PostgreSQL wants.
func copyCluster(ctx context.Context, cache, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(cache, "data")+"/.", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: copy the initialised cluster: %w\n%s", err, out)
	}
	return nil
}

// seed fills data with base's cluster after Options.Seed ran on it. The
// test harness seeds its migrated template this way: some forty test
// processes each started a server and ran every migration on it (about
// 0.6 s of CPU each); now the first one does, and the others copy the
// result.
func (s *Server) seed(ctx context.Context, base, data string) error {
	if err := copyCluster(ctx, base, data); err != nil {
		return err
	}
	// The seed server listens on the port this server will: what Seed
	// remembers in-process about the server it ran on (pgtestdb keeps the
	// template's host and port) stays true of this one.
	seed := &Server{Strategy: Local, Host: s.Host, User: s.User, Password: s.Password, binDir: s.binDir, cred: s.cred,
		dataDir: data, opts: Options{Ephemeral: true, MaxConnections: 20}, Port: s.Port}
	if err := seed.Start(ctx); err != nil {
		seed.cleanup()
		return err
	}
	err := s.opts.Seed(ctx, seed)
	// A fast stop ends with a checkpoint: the copy needs no recovery.
	if serr := seed.Stop("fast"); err == nil {
		err = serr
	}
	seed.cleanup()
	if err != nil {
		return fmt.Errorf("pgserver: seed the cached cluster: %w", err)
	}
	return nil
}

// pruneSeeds removes base's other seeded caches (older migrations, say)
// made over a day ago: they may live in memory (./test puts TMPDIR on
// /dev/shm), one more for every change to the migrations. A day keeps
// clear of another checkout's run that still copies its own.
func pruneSeeds(base, keep string) {
	old, _ := filepath.Glob(base + "-seed-*")
	for _, d := range old {
		if st, err := os.Stat(d); err == nil && d != keep && time.Since(st.ModTime()) > 24*time.Hour {
			_ = os.RemoveAll(d)
		}
	}
}

// traversable checks that every parent of dir lets others search it, which
// the postgres user needs to reach its data directory.
func traversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgserver: %s is not traversable by the postgres user (mode %v); "+
				"choose a data directory under a 0755 parent or chmod o+x it", d, st.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// Start (re)starts the postmaster on s.Port and waits until it accepts
// connections. It is exported so experiments can restart a server they
// stopped with Stop("immediate").
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Strategy != Local {
		return fmt.Errorf("pgserver: Start is only for local servers")
	}
	if s.cmd != nil {
		return fmt.Errorf("pgserver: already running")
	}
	maxConn := s.opts.MaxConnections
	if maxConn == 0 {
		maxConn = 400
	}
	args := []string{"-D", s.dataDir, "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "max_connections=" + strconv.Itoa(maxConn)}
	if s.opts.Ephemeral {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	// Setpgid keeps a terminal's Ctrl-C away from the postmaster (we stop it
	// ourselves, in order); Pdeathsig takes it down if we die without
	// stopping it (SIGQUIT is PostgreSQL's immediate shutdown).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	cmd.Dir = os.TempDir()
	if s.opts.Log != nil {
		cmd.Stdout, cmd.Stderr = s.opts.Log, s.opts.Log
	} else {
		if s.logFile == nil {
			f, err := os.OpenFile(filepath.Join(filepath.Dir(s.dataDir), "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return fmt.Errorf("pgserver: log file: %w", err)
			}
			s.logFile = f
		}
		cmd.Stdout, cmd.Stderr = s.logFile, s.logFile
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("pgserver: postgres exited during start-up; see %s", s.logPath())
		default:
		}
		if err := ping(ctx, s.URL("postgres")); err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			<-exited
			s.cmd = nil
			return fmt.Errorf("pgserver: postgres did not accept connections in time; see %s", s.logPath())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) logPath() string { return filepath.Join(filepath.Dir(s.dataDir), "postgres.log") }

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// Stop shuts the server down: mode "smart", "fast" (default) or
// "immediate" (no checkpoint; crash recovery on the next start — what
// `pg_ctl stop -m immediate` does). A local server can be started again.
func (s *Server) Stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.Strategy {
	case Container:
		if s.terminate != nil {
			return s.terminate(context.Background())
		}
		return nil
	case FromURL:
		return nil
	}
	if s.cmd == nil {
		return nil
	}
	sig := syscall.SIGINT
	switch mode {
	case "smart":
		sig = syscall.SIGTERM
	case "immediate":
		sig = syscall.SIGQUIT
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// Close stops the server and removes a temporary data directory.
func (s *Server) Close() error {
	err := s.Stop("fast")
	s.cleanup()
	return err
}

func (s *Server) cleanup() {
	if s.logFile != nil {
		_ = s.logFile.Close()
		s.logFile = nil
	}
	if s.ownedDir != "" {
		_ = os.RemoveAll(s.ownedDir)
	}
}

// reapStale removes temporary clusters left by test processes that died
// without cleaning up (their postmaster died with them via Pdeathsig).
func reapStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "fencelab-pg-*"))
	for _, d := range dirs {
		parts := strings.Split(filepath.Base(d), "-")
		if len(parts) < 4 {
			continue
		}
		pid, err := strconv.Atoi(parts[2])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // still alive (or not ours to judge)
		}
		_ = os.RemoveAll(d)
	}
}

// freePort returns preferred when it is free, else a port the kernel picks.
func freePort(preferred int) int {
	if preferred > 0 {
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(preferred))); err == nil {
			_ = l.Close()
			return preferred
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
