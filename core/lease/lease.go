// Package lease gives a process the right to act on a named thing for a
// while, and gives the things it writes a way to refuse a process whose
// right has lapsed.
//
// The distributed-lock chapter's scenario: a daily report job runs on
// several instances. A takes the lease, checks it still holds it, and then
// the whole process stalls; the lease expires; B takes it and writes; A
// wakes up and writes its stale result. A cannot notice its own stall: the
// next instruction it runs is the write. No lease, however carefully
// renewed, closes that gap. What closes it is the fence: every grant
// issues a number larger than any issued before for that name (LOCK-I1),
// and the protected resource compares the writer's fence with the highest
// it has seen in the same transaction as the write (Guard), refusing a
// lower one with ErrStaleFence.
//
// The pieces stack, as the chapter says: Acquire is the atomic placeholder
// against concurrent grabs, the TTL guarantees eventual release after a
// crash, the Watchdog keeps a long task from expiring by mistake, and the
// fence stops an expired holder from writing. Only the last is a guarantee.
//
// Every expiry decision is made by the database's clock (now()), never by a
// process's: the processes disagree with each other and with the database,
// and the database is the one place they all ask.
package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// Bounds on inputs. Names and holders end up in keys and logs; a TTL below
// a millisecond cannot be held long enough to use, and one above a day is
// a lock, not a lease.
const (
	MaxNameLen = 200
	MinTTL     = time.Millisecond
	MaxTTL     = 24 * time.Hour
)

// Lease is one grant: the right of Holder to act on Name under Fence until
// ExpiresAt (by the database clock).
type Lease struct {
	Name   string
	Holder string
	// Fence is strictly larger than every fence issued before for Name
	// (LOCK-I1). Protected resources compare it; see Guard.
	Fence int64
	// TTL is how long each renewal extends the lease.
	TTL time.Duration
	// GrantedAt and ExpiresAt are database timestamps, for logs and
	// display. Never compare ExpiresAt with a local clock to decide
	// anything: ask the database (Renew) or let the resource decide
	// (Guard).
	GrantedAt time.Time
	ExpiresAt time.Time

	// heldUntil is the latest local (monotonic) instant at which the lease
	// is certainly still ours: when the granting or renewing statement was
	// sent, plus the TTL. The database's now() is later than that send, so
	// its expiry is too. The watchdog gives a renewal until then, and no
	// longer, to answer.
	heldUntil time.Time
}

func (l Lease) String() string {
	return fmt.Sprintf("lease %q held by %q under fence %d", l.Name, l.Holder, l.Fence)
}

// Manager grants, renews and releases leases in one database. Its querier
// is a pool in production; a test may pass a transaction to pin now().
type Manager struct {
	db pg.Querier
}

// New returns a Manager over db.
func New(db pg.Querier) *Manager { return &Manager{db: db} }

// Acquire grants name to holder for ttl when the lease is free, expired or
// released, or already holder's, and returns it with a fence strictly
// larger than any issued before for name — also across expiry, release and
// a re-take by the same holder. It fails with ErrHeld while another holder's
// lease is live. One statement does it all; see sqlAcquire.
//
// A holder string identifies one acting instance (host, process, task): two
// goroutines sharing one would take the lease from each other.
func (m *Manager) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if err := validate(name, holder, ttl); err != nil {
		return Lease{}, err
	}
	l := Lease{Name: name, Holder: holder, TTL: ttl, heldUntil: time.Now().Add(ttl)}
	err := m.db.QueryRow(ctx, sqlAcquire, name, holder, ttl.Microseconds()).Scan(&l.Fence, &l.GrantedAt, &l.ExpiresAt)
	if err = pg.MapError(err); err != nil {
		if isNoRows(err) {
			return Lease{}, fmt.Errorf("%w: %q (asked by %q)", ErrHeld, name, holder)
		}
		return Lease{}, fmt.Errorf("lease: acquire %q: %w", name, err)
	}
	return l, nil
}

// Renew extends l by l.TTL from now, provided it is still l: same holder,
// same fence, not expired. Otherwise it returns ErrLost and the caller must
// stop acting under l. The returned lease carries the new expiry.
func (m *Manager) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validateLease(l); err != nil {
		return l, err
	}
	sent := time.Now()
	err := m.db.QueryRow(ctx, sqlRenew, l.Name, l.Holder, l.Fence, l.TTL.Microseconds()).Scan(&l.ExpiresAt)
	if err = pg.MapError(err); err != nil {
		if isNoRows(err) {
			return l, fmt.Errorf("%w: %s expired or was taken", ErrLost, l)
		}
		return l, fmt.Errorf("lease: renew %q: %w", l.Name, err)
	}
	l.heldUntil = sent.Add(l.TTL)
	return l, nil
}

// Release gives l up now so the next Acquire need not wait for the TTL. The
// row and its fence stay (LOCK-I1). It returns ErrLost when a newer grant
// has replaced l, in which case it changed nothing; callers releasing on
// the way out usually ignore that.
func (m *Manager) Release(ctx context.Context, l Lease) error {
	if err := validateLease(l); err != nil {
		return err
	}
	tag, err := m.db.Exec(ctx, sqlRelease, l.Name, l.Holder, l.Fence)
	if err != nil {
		return fmt.Errorf("lease: release %q: %w", l.Name, pg.MapError(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s was replaced before its release", ErrLost, l)
	}
	return nil
}

// State is a lease row as the database sees it now.
type State struct {
	Holder    string
	Fence     int64
	GrantedAt time.Time
	ExpiresAt time.Time
	Live      bool // expires_at > now(), by the database clock
}

// Get reads the current state of name (pg.ErrNotFound if it was never
// granted). For display and tests; a decision to act must go through
// Acquire or Renew, which check and change in one statement.
func (m *Manager) Get(ctx context.Context, name string) (State, error) {
	var s State
	err := m.db.QueryRow(ctx, sqlGet, name).Scan(&s.Holder, &s.Fence, &s.GrantedAt, &s.ExpiresAt, &s.Live)
	if err = pg.MapError(err); err != nil {
		return State{}, fmt.Errorf("lease: get %q: %w", name, err)
	}
	return s, nil
}

func validate(name, holder string, ttl time.Duration) error {
	if err := validName("name", name); err != nil {
		return err
	}
	if err := validName("holder", holder); err != nil {
		return err
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl must be between %s and %s, got %s", ErrInvalid, MinTTL, MaxTTL, ttl)
	}
	return nil
}

// CheckName reports whether s is acceptable as a lease name, holder or
// guarded resource (ErrInvalid otherwise), so configuration can be refused
// at start-up instead of on every Acquire.
func CheckName(what, s string) error { return validName(what, s) }

// validName bounds a name, holder or resource: non-empty, at most
// MaxNameLen bytes of UTF-8 without NUL (which PostgreSQL text refuses).
func validName(what, s string) error {
	if s == "" || len(s) > MaxNameLen || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return fmt.Errorf("%w: %s must be 1..%d bytes of UTF-8 without NUL, got %q", ErrInvalid, what, MaxNameLen, truncate(s))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func isNoRows(err error) bool { return errors.Is(err, pg.ErrNotFound) }

func validateLease(l Lease) error {
	if err := validate(l.Name, l.Holder, l.TTL); err != nil {
		return err
	}
	if l.Fence <= 0 {
		return fmt.Errorf("%w: fence %d was never granted", ErrInvalid, l.Fence)
	}
	return nil
}

// PurgeTx is the retention of a user's leases: inside tx, it deletes up
// to limit leases whose name starts with prefix and whose latest grant
// and expiry are both older than age by the database clock, with every
// grant of those names and the fence guards bound to them (sqlPurge says
// why that is safe, and on which assumption). It returns the names and
// the grants deleted; the caller deletes what it keeps under those names
// in the same transaction, so its history goes whole (services/report:
// report.purge).
func PurgeTx(ctx context.Context, tx pgx.Tx, prefix string, age time.Duration, limit int) ([]string, int64, error) {
	if prefix == "" {
		return nil, 0, errors.New("lease: purge: a prefix is required (a purge never takes every lease)")
	}
	var names []string
	var grants int64
	if err := tx.QueryRow(ctx, sqlPurge, prefix, age.Microseconds(), limit).Scan(&names, &grants); err != nil {
		return nil, 0, fmt.Errorf("lease: purge: %w", pg.MapError(err))
	}
	return names, grants, nil
}

// PurgeProbe is PurgeTx's statement as a growth probe (e2e/growth, bench
// growth): a batch must examine rows in proportion to it.
func PurgeProbe(name, prefix string, age time.Duration, limit int) pg.Probe {
	return pg.Probe{Name: name, When: pg.Periodic, SQL: sqlPurge,
		Args: []any{prefix, age.Microseconds(), limit}, Bound: pg.Batch(limit * 5)}
}
