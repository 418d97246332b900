package lease

import "errors"

// Sentinels. Callers branch with errors.Is; the wrapped message says which
// lease, holder or fence was involved.
var (
	// ErrHeld: another holder's lease is live; try again after it expires.
	ErrHeld = errors.New("lease: held by another holder")
	// ErrLost: the caller no longer holds the lease (it expired, or it was
	// taken, possibly by the caller itself under a newer fence). Whatever
	// the caller was doing under it must stop.
	ErrLost = errors.New("lease: lost")
	// ErrStaleFence: a protected resource has already admitted a write with
	// a higher fence; this write was refused and changed nothing.
	ErrStaleFence = errors.New("lease: stale fence")
	// ErrOtherLease: the resource is guarded by a different lease, whose
	// fences cannot be compared with this one's. A wiring mistake.
	ErrOtherLease = errors.New("lease: resource is guarded by another lease")
	// ErrInvalid: a caller passed an empty name or holder, a TTL out of
	// range, or a lease value that was never granted.
	ErrInvalid = errors.New("lease: invalid argument")
)
