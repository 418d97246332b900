package shortlink

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/singleflight"
)

// resolver answers "where does this code lead?" for the redirect path:
// cache first, then the database.
//
// SL-I2 — the revocation window. Every answer it gives comes from a
// database read that began less than ttl before the answer is used: cache
// hits by ttlCache's rule, fresh reads because a read that took ttl or
// longer is not served (ErrLookupUnavailable). A read that began before a
// revoke committed is the only way to see the link live, so a 302 to a
// revoked target is served at most ttl after the revoke commits, on any
// replica, whether or not an invalidation arrives. Invalidations (the local
// revoke, LISTEN/NOTIFY from others) only make the window shorter.
//
// Unknown codes are cached too (negative caching) under the same rule, in
// a separate, smaller cache: a code created on another replica may answer
// 404 here for at most ttl, and a scan of random codes cannot evict the
// links people follow.
type resolver struct {
	ttl     time.Duration
	timeout time.Duration
	known   *ttlCache[route]
	unknown *ttlCache[struct{}]
	flights singleflight.Group
	lookup  func(ctx context.Context, code string) (route, bool, error)
	m       *metrics
	log     *slog.Logger
}

func newResolver(cfg Config, lookup func(context.Context, string) (route, bool, error), m *metrics, log *slog.Logger) *resolver {
	return &resolver{
		ttl:     cfg.CacheTTL,
		timeout: cfg.LookupTimeout,
		known:   newTTLCache[route](cfg.CacheSize, cfg.CacheTTL),
		unknown: newTTLCache[struct{}](max(1, cfg.CacheSize/4), cfg.CacheTTL),
		lookup:  lookup,
		m:       m,
		log:     log,
	}
}

type lookupResult struct {
	route route
	found bool
	began time.Time
}

// resolve returns the route for code as of a read that began less than ttl
// before now; found is false for an unknown code.
func (r *resolver) resolve(ctx context.Context, code string, now time.Time) (route, bool, error) {
	if rt, ok := r.known.Get(code, now); ok {
		r.m.hit.Inc()
		return rt, true, nil
	}
	if _, ok := r.unknown.Get(code, now); ok {
		r.m.negHit.Inc()
		return route{}, false, nil
	}
	r.m.miss.Inc()
	// Concurrent misses of one code share one read. The read is detached
	// from the first caller's context (its client may leave) and bounded
	// by the lookup timeout instead.
	v, err, _ := r.flights.Do(code, func() (any, error) {
		genKnown, genUnknown := r.known.generation(code), r.unknown.generation(code)
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
		defer cancel()
		rt, found, err := r.lookup(ctx, code)
		if err != nil {
			return nil, err
		}
		if found {
			r.known.Put(code, rt, began, genKnown)
		} else {
			r.unknown.Put(code, struct{}{}, began, genUnknown)
		}
		return lookupResult{route: rt, found: found, began: began}, nil
	})
	if err != nil {
		// Timed out or unreachable: a 503 the client may retry. The cause
		// is logged, not sent.
		r.log.Warn("shortlink: lookup failed", "code", code, "err", err)
		return route{}, false, errLookupUnavailable
	}
	res := v.(lookupResult)
	if time.Since(res.began) >= r.ttl {
		return route{}, false, errLookupUnavailable // too old to serve (SL-I2)
	}
	return res.route, res.found, nil
}

// invalidate forgets code in both caches.
func (r *resolver) invalidate(code string) {
	r.known.Invalidate(code)
	r.unknown.Invalidate(code)
}

// purge forgets everything.
func (r *resolver) purge() {
	r.known.Purge()
	r.unknown.Purge()
}

func (r *resolver) len() int { return r.known.Len() + r.unknown.Len() }
