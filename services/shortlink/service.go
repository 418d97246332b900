package shortlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
)

// maxCodeAttempts bounds the random codes tried for one creation; with
// 62^8 codes, even a billion links make a second try rare.
const maxCodeAttempts = 5

// statsTimeout bounds the owner's stats read (it counts clicks, and the
// clicks table may be locked by a sick stats side).
const statsTimeout = 2 * time.Second

// Service holds the rules: create, revoke, read, stats, visit.
type Service struct {
	db       *pgxpool.Pool
	log      *slog.Logger
	resolver *resolver
	clicks   *clickRecorder
	m        *metrics
	// newCode returns a random code candidate (replaced in tests to force
	// collisions).
	newCode func() string
	now     func() time.Time
	baseURL string // Config.BaseURL
	// allowPrivate is Config.AllowPrivateTargets.
	allowPrivate bool
	// routeWords are the first path segments of the process's routes,
	// refused as aliases (reserveRoutes); nil until the routes are mounted.
	routeWords atomic.Pointer[map[string]bool]
}

// reserveRoutes refuses the first path segments of every route the
// process serves as aliases: /s/console must not read as the console.
func (s *Service) reserveRoutes(segments []string) {
	m := make(map[string]bool, len(segments))
	for _, w := range segments {
		m[strings.ToLower(w)] = true
	}
	s.routeWords.Store(&m)
}

// Create stores a new link owned by owner: under req.Alias when given
// (409 alias_taken if any link holds it), else under a fresh random code.
// The target and expiry are fixed from here on.
func (s *Service) Create(ctx context.Context, owner string, req CreateRequest) (Link, error) {
	if err := ValidateTarget(req.Target); err != nil {
		return Link{}, err
	}
	if !s.allowPrivate {
		u, _ := url.Parse(req.Target) // ValidateTarget parsed it
		if why := privateTarget(u.Hostname()); why != "" {
			return Link{}, fmt.Errorf("%w: %s is %s (the service accepts such targets only with %s=true)",
				errPrivateTarget, u.Hostname(), why, EnvAllowPrivate)
		}
	}
	now := s.now()
	if err := validateExpiry(req.ExpiresAt, now); err != nil {
		return Link{}, err
	}
	if req.Alias != "" {
		if err := ValidateAlias(req.Alias); err != nil {
			return Link{}, err
		}
		if w := s.routeWords.Load(); w != nil && (*w)[strings.ToLower(req.Alias)] {
			return Link{}, fmt.Errorf("%w: %q is the start of the service's own paths", errReservedAlias, req.Alias)
		}
		// Aliases are case-insensitive: stored in lower case, so "CH9"
		// and "ch9" are one alias (the second is 409 alias_taken).
		req.Alias = strings.ToLower(req.Alias)
		l, created, err := createLink(ctx, s.db, req.Alias, req.Target, owner, true, req.ExpiresAt)
		switch {
		case err != nil:
			return Link{}, err
		case !created:
			return Link{}, fmt.Errorf("%w: %q", errAliasTaken, req.Alias) // SL-I1: never overwritten
		}
		return s.created(l, now), nil
	}
	for range maxCodeAttempts {
		l, created, err := createLink(ctx, s.db, s.newCode(), req.Target, owner, false, req.ExpiresAt)
		if err != nil {
			return Link{}, err
		}
		if created {
			return s.created(l, now), nil
		}
		// A random code collided with an existing one: draw another.
	}
	return Link{}, errCodeExhausted
}

// created finishes a creation: this replica may hold "unknown" for the
// code, which is no longer true (other replicas hear the notification).
func (s *Service) created(l Link, now time.Time) Link {
	s.resolver.invalidate(l.Code)
	l.State = l.stateAt(now)
	return l
}

// Revoke ends a link for good. Only its owner (or an admin) may; revoking
// a revoked link returns it unchanged.
func (s *Service) Revoke(ctx context.Context, actor httpx.Principal, code string) (Link, error) {
	if !validCode(code) {
		return Link{}, ErrNotFound
	}
	l, ok, err := revokeLink(ctx, s.db, code, actor.Subject, actor.Role == httpx.RoleAdmin)
	if err != nil {
		return Link{}, err
	}
	if !ok {
		// Nothing changed; find out why. Owner and revocation never change
		// back, so this read cannot contradict the update above.
		if l, err = s.Get(ctx, actor, code); err != nil {
			return Link{}, err
		}
		return l, nil // already revoked
	}
	// This replica stops serving the old target now; others when the
	// notification arrives, and at most CacheTTL later if it never does.
	s.resolver.invalidate(code)
	l.State = l.stateAt(s.now())
	return l, nil
}

// Get returns a link to its owner (or an admin).
func (s *Service) Get(ctx context.Context, actor httpx.Principal, code string) (Link, error) {
	if !validCode(code) {
		return Link{}, ErrNotFound
	}
	l, err := getLink(ctx, s.db, code)
	if err != nil {
		return Link{}, notFound(err)
	}
	if !actor.CanActFor(l.Owner) {
		return Link{}, errNotOwner
	}
	l.State = l.stateAt(s.now())
	return l, nil
}

// Stats returns the link's stored clicks and counted drops to its owner.
// Drops appear once flushed (every ClickInterval).
func (s *Service) Stats(ctx context.Context, actor httpx.Principal, code string) (Stats, error) {
	if _, err := s.Get(ctx, actor, code); err != nil {
		return Stats{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	st, err := readStats(ctx, s.db, code)
	if err != nil && ctx.Err() != nil {
		return Stats{}, errStatsUnavailable
	}
	return st, err
}

// Visit is the redirect path: the live target of code, with the click
// queued for the writer. Expiry is checked on every visit against the
// cached expiry (it never changes), so a link stops at its expiry exactly;
// revocation is seen within CacheTTL (SL-I2). Recording never waits on the
// stats side (SL-I3).
func (s *Service) Visit(ctx context.Context, code string) (string, error) {
	return s.visit(ctx, code, true)
}

// Peek is Visit without the click: HEAD /s/{code} (link checkers,
// previews) answers the same status and Location and counts nothing.
func (s *Service) peek(ctx context.Context, code string) (string, error) {
	return s.visit(ctx, code, false)
}

func (s *Service) visit(ctx context.Context, code string, click bool) (string, error) {
	if !validCode(code) {
		return "", ErrNotFound
	}
	now := s.now()
	rt, found, err := s.resolver.resolve(ctx, code, now)
	if err == nil && !found {
		// Aliases are case-insensitive (stored in lower case); random
		// codes are not, so only an alias answers for a case variant.
		// (Only on a miss: lowering a mixed-case random code allocates,
		// and a hit never needs it.)
		if lower := strings.ToLower(code); lower != code {
			if alt, ok, aerr := s.resolver.resolve(ctx, lower, now); aerr == nil && ok && alt.custom {
				rt, found, code = alt, true, lower
			}
		}
	}
	switch {
	case err != nil:
		return "", err
	case !found:
		return "", ErrNotFound
	case rt.revoked:
		return "", errRevoked
	case !rt.expiresAt.IsZero() && !now.Before(rt.expiresAt):
		return "", errExpired
	}
	if click {
		s.clicks.Record(code, now)
	}
	return rt.target, nil
}

// notFound turns the store's "no rows" into the module's 404.
func notFound(err error) error {
	if errors.Is(err, pg.ErrNotFound) {
		return ErrNotFound
	}
	return err
}
