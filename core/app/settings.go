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
	setting(r, key, dst, time.ParseDuration, func(d time.Duration) bool { return d >= lo && d <= hi },
		fmt.Sprintf("a duration in %v..%v", lo, hi))
}

// Int sets *dst from key when present, within [lo, hi].
func (r *SettingsReader) Int(key string, dst *int, lo, hi int) {
	setting(r, key, dst, strconv.Atoi, func(n int) bool { return n >= lo && n <= hi },
		fmt.Sprintf("an integer in %d..%d", lo, hi))
}

// Bool sets *dst from key when present.
func (r *SettingsReader) Bool(key string, dst *bool) {
	setting(r, key, dst, strconv.ParseBool, nil, "true or false")
}

// setting sets *dst from key when present: parsed by parse and, when
// inBounds is given, accepted by it; anything else is r's error, saying
// what was wanted, and leaves *dst (the default) as it was.
func setting[V any](r *SettingsReader, key string, dst *V, parse func(string) (V, error), inBounds func(V) bool, want string) {
	v, ok := r.cfg.Lookup(key)
	if !ok {
		return
	}
	x, err := parse(v)
	if err != nil || (inBounds != nil && !inBounds(x)) {
		r.fail(key, v, want)
		return
	}
	*dst = x
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
