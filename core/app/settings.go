package app

import (
	"fmt"
	"strconv"
	"time"
)

// SettingsReader parses a module's settings through Config.Lookup (test
// overrides first, then the environment), keeping the first error so a
// constructor reports one clear message instead of silently using a default.
type SettingsReader struct {
	cfg    Config
	module string
	err    error
}

// NewSettingsReader returns a reader for module's settings.
func NewSettingsReader(cfg Config, module string) *SettingsReader {
	return &SettingsReader{cfg: cfg, module: module}
}

// Err is the first malformed setting, or nil.
func (r *SettingsReader) Err() error { return r.err }

func (r *SettingsReader) fail(key, v, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s=%q: want %s", r.module, key, v, want)
	}
}

// Duration sets *dst from key when present, within [lo, hi].
func (r *SettingsReader) Duration(key string, dst *time.Duration, lo, hi time.Duration) {
	v, ok := r.cfg.Lookup(key)
	if !ok {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		r.fail(key, v, fmt.Sprintf("a duration in %v..%v", lo, hi))
		return
	}
	*dst = d
}

// Int sets *dst from key when present, within [lo, hi].
func (r *SettingsReader) Int(key string, dst *int, lo, hi int) {
	v, ok := r.cfg.Lookup(key)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail(key, v, fmt.Sprintf("an integer in %d..%d", lo, hi))
		return
	}
	*dst = n
}

// Bool sets *dst from key when present.
func (r *SettingsReader) Bool(key string, dst *bool) {
	v, ok := r.cfg.Lookup(key)
	if !ok {
		return
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(key, v, "true or false")
		return
	}
	*dst = b
}

// String sets *dst from key when present; check, if given, validates it.
func (r *SettingsReader) String(key string, dst *string, check func(string) error) {
	v, ok := r.cfg.Lookup(key)
	if !ok {
		return
	}
	if check != nil {
		if err := check(v); err != nil {
			r.fail(key, v, err.Error())
			return
		}
	}
	*dst = v
}
