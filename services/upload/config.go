package upload

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/app"
)

// Config holds the module's settings. Each comes from an environment
// variable (or app.Config.Settings in tests).
type Config struct {
	// Dir is the local blob store's root: blobs/sha256/<hex> and partial/<session>
	// live under it. Default: <FENCELAB_DATA_DIR>/upload.
	Dir string
	// MaxFileSize bounds a session's declared total size.
	MaxFileSize int64
	// MaxChunkSize bounds a session's chunk size, and so every chunk body.
	MaxChunkSize int64
	// MaxChunks bounds a session's declared chunk count.
	MaxChunks int
	// Grace is how long bytes without committed metadata (orphan blobs,
	// completed but uncommitted sessions) and idle open sessions are kept
	// before GC reclaims them (UP-F2).
	Grace time.Duration
	// GCInterval is how often GC runs (one periodic job per slot across
	// every process).
	GCInterval time.Duration
	// SessionRetention is how long a session that ended without a file
	// (failed, aborted, expired) is kept for inspection before GC deletes
	// it with its chunk and hash rows.
	SessionRetention time.Duration
	// GCScan bounds the directory entries one GC run examines in the blob
	// and in the partial directory (gcscan.go): the next ones after a
	// persisted cursor.
	GCScan int
	// ChunkTimeout bounds reading one chunk's body, so a stalled client
	// cannot hold a chunk's range lock indefinitely.
	ChunkTimeout time.Duration
}

// Setting names, as environment variables.
const (
	EnvDir              = "FENCELAB_UPLOAD_DIR"
	EnvMaxFileSize      = "FENCELAB_UPLOAD_MAX_FILE_SIZE"
	EnvMaxChunkSize     = "FENCELAB_UPLOAD_MAX_CHUNK_SIZE"
	EnvMaxChunks        = "FENCELAB_UPLOAD_MAX_CHUNKS"
	EnvGrace            = "FENCELAB_UPLOAD_GRACE"
	envGCInterval       = "FENCELAB_UPLOAD_GC_INTERVAL"
	envSessionRetention = "FENCELAB_UPLOAD_SESSION_RETENTION"
	envChunkTimeout     = "FENCELAB_UPLOAD_CHUNK_TIMEOUT"
	EnvGCScan           = "FENCELAB_UPLOAD_GC_SCAN"
)

// DefaultConfig returns the defaults; Dir is filled from the app's data dir.
func DefaultConfig() Config {
	return Config{
		MaxFileSize:      4 << 30,
		MaxChunkSize:     64 << 20,
		MaxChunks:        10_000,
		Grace:            24 * time.Hour,
		GCInterval:       10 * time.Minute,
		SessionRetention: 7 * 24 * time.Hour,
		ChunkTimeout:     5 * time.Minute,
		GCScan:           defaultGCScan,
	}
}

// LoadConfig reads the settings over the defaults.
func LoadConfig(ac app.Config) (Config, error) {
	c := DefaultConfig()
	c.Dir = filepath.Join(ac.DataDir, "upload")
	r := app.NewSettingsReader(ac, "upload")
	r.String(EnvDir, &c.Dir, nil)
	size := func(key string, dst *int64, hi int64) {
		var s string
		r.String(key, &s, func(v string) error {
			n, err := ParseSize(v)
			if err != nil || n < 1 || n > hi {
				return fmt.Errorf("a size in 1..%s (e.g. 64MiB)", FormatSize(hi))
			}
			*dst = n
			return nil
		})
	}
	size(EnvMaxFileSize, &c.MaxFileSize, 1<<40)
	size(EnvMaxChunkSize, &c.MaxChunkSize, 1<<30)
	r.Int(EnvMaxChunks, &c.MaxChunks, 1, 1_000_000)
	r.Duration(EnvGrace, &c.Grace, time.Second, 365*24*time.Hour)
	r.Duration(envGCInterval, &c.GCInterval, time.Second, 24*time.Hour)
	r.Duration(envSessionRetention, &c.SessionRetention, time.Minute, 10*366*24*time.Hour)
	r.Duration(envChunkTimeout, &c.ChunkTimeout, time.Second, 24*time.Hour)
	r.Int(EnvGCScan, &c.GCScan, 1, 10_000_000)
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return Config{}, fmt.Errorf("upload: %s: %w", EnvDir, err)
	}
	c.Dir = abs
	return c, nil
}

// ParseSize reads a byte count: a plain integer, or one with a binary
// (KiB, MiB, GiB, TiB) or decimal (kB, MB, GB, TB) unit.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want an integer with an optional unit (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)", s)
	}
	mult := map[string]int64{
		"": 1, "B": 1,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * mult, nil
}

// FormatSize writes n with the largest binary unit that keeps it readable.
func FormatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i:i+1] + "iB"
}
