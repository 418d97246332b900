package app

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// Config is the process-wide configuration shared by serve, worker and dev.
// Every field has a flag and an environment variable; flags win.
type Config struct {
	Addr        string // FENCELAB_ADDR: HTTP listen address
	DatabaseURL string // DATABASE_URL
	MaxConns    int    // FENCELAB_DB_MAX_CONNS: pool size per process (book: 12)
	TokenSecret string // FENCELAB_TOKEN_SECRET: HMAC secret for bearer tokens (≥16 bytes)
	Workers     int    // FENCELAB_WORKERS: claim-engine worker goroutines per process
	DataDir     string // FENCELAB_DATA_DIR: local state (dev cluster, blobs)
	LogLevel    string // FENCELAB_LOG_LEVEL: debug|info|warn|error
	LogFormat   string // FENCELAB_LOG_FORMAT: text|json
	AccessLog   bool   // FENCELAB_ACCESS_LOG: one log line per request
	// ShutdownGrace bounds graceful shutdown (FENCELAB_SHUTDOWN_GRACE).
	ShutdownGrace time.Duration
	// Settings override environment variables for module settings read
	// through Lookup, so one test process can run several apps with
	// different module settings (environment variables are process-wide).
	Settings map[string]string
}

// Lookup returns a module setting: Settings[key] when present, else the
// environment variable key. Modules parse the value themselves and report
// a malformed one from their constructor.
func (c Config) Lookup(key string) (string, bool) {
	if v, ok := c.Settings[key]; ok {
		return v, true
	}
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v, true
	}
	return "", false
}

// Defaults returns the configuration before env and flags.
func Defaults() Config {
	return Config{
		Addr:          "127.0.0.1:8080",
		MaxConns:      pg.DefaultMaxConns,
		Workers:       8,
		DataDir:       ".fencelab",
		LogLevel:      "info",
		LogFormat:     "text",
		AccessLog:     true,
		ShutdownGrace: 10 * time.Second,
	}
}

// Bind registers the flags on fs, with defaults taken from the environment.
func (c *Config) Bind(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", Env("FENCELAB_ADDR", Defaults().Addr), "HTTP listen address (FENCELAB_ADDR)")
	c.BindNoHTTP(fs)
}

// BindNoHTTP is Bind without the listen address, for processes that serve
// no HTTP (worker): a flag that does nothing would mislead.
func (c *Config) BindNoHTTP(fs *flag.FlagSet) {
	d := Defaults()
	fs.StringVar(&c.DatabaseURL, "database-url", Env("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL)")
	fs.IntVar(&c.MaxConns, "db-max-conns", EnvInt("FENCELAB_DB_MAX_CONNS", d.MaxConns),
		"database pool size per process; budget: processes × this ≤ connections the database allows the service (FENCELAB_DB_MAX_CONNS)")
	c.TokenSecret = Env("FENCELAB_TOKEN_SECRET", c.TokenSecret)
	fs.Var(SecretFlag(&c.TokenSecret), "token-secret", "HMAC secret for bearer tokens, ≥16 bytes (FENCELAB_TOKEN_SECRET; never printed)")
	fs.IntVar(&c.Workers, "workers", EnvInt("FENCELAB_WORKERS", d.Workers), "claim-engine worker goroutines per process (FENCELAB_WORKERS)")
	fs.StringVar(&c.DataDir, "data-dir", Env("FENCELAB_DATA_DIR", d.DataDir), "local state directory: dev cluster, blobs (FENCELAB_DATA_DIR)")
	fs.StringVar(&c.LogLevel, "log-level", Env("FENCELAB_LOG_LEVEL", d.LogLevel), "debug|info|warn|error (FENCELAB_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", Env("FENCELAB_LOG_FORMAT", d.LogFormat), "text|json (FENCELAB_LOG_FORMAT)")
	fs.BoolVar(&c.AccessLog, "access-log", EnvBool("FENCELAB_ACCESS_LOG", d.AccessLog), "log every request (FENCELAB_ACCESS_LOG)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", EnvDuration("FENCELAB_SHUTDOWN_GRACE", d.ShutdownGrace), "graceful shutdown bound (FENCELAB_SHUTDOWN_GRACE)")
}

// SecretFlag is a flag.Value for a secret: its default (taken from the
// environment) is never printed by --help or in a usage error.
func SecretFlag(p *string) flag.Value { return secretFlag{p} }

type secretFlag struct{ p *string }

func (f secretFlag) String() string {
	return "" // flag's PrintDefaults shows no default for ""
}

func (f secretFlag) Set(s string) error { *f.p = s; return nil }

// Validate reports configuration a process cannot start with.
func (c Config) Validate() error {
	if c.MaxConns < 1 || c.MaxConns > 1000 {
		return fmt.Errorf("db-max-conns must be in 1..1000, got %d", c.MaxConns)
	}
	if c.Workers < 0 || c.Workers > 10000 {
		return fmt.Errorf("workers must be in 0..10000, got %d", c.Workers)
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		return err
	}
	if _, err := LoadHTTPSettings(c); err != nil {
		return err
	}
	return nil
}

// Logger builds the process logger.
func (c Config) Logger() *slog.Logger {
	lvl, _ := ParseLevel(c.LogLevel)
	o := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}

// ParseLevel parses a log level name.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// Env returns the environment variable or def.
func Env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// EnvInt is Env for integers; a malformed value is fatal at start-up rather
// than silently replaced (as for EnvBool and EnvDuration).
func EnvInt(key string, def int) int { return envParsed(key, def, "an integer", strconv.Atoi) }

// EnvBool is Env for booleans.
func EnvBool(key string, def bool) bool {
	return envParsed(key, def, "a boolean", func(v string) (bool, error) { return strconv.ParseBool(strings.ToLower(v)) })
}

// EnvDuration is Env for durations ("250ms", "30s").
func EnvDuration(key string, def time.Duration) time.Duration {
	return envParsed(key, def, "a duration", time.ParseDuration)
}

// envParsed is Env read through parse: def when unset or empty, and exit 2
// with a message naming the key when the value is not what (an integer, …).
func envParsed[V any](key string, def V, what string, parse func(string) (V, error)) V {
	v := Env(key, "")
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencelab: %s=%q is not %s\n", key, v, what)
		os.Exit(2)
	}
	return x
}
