package ops

import (
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/lease"
)

// Lease is chapter 1's library: leases and fencing tokens. Its invariants
// hold over every lease any module takes; it has no runtime part.
func Lease() app.Module {
	return app.Module{Name: "lease", Chapter: "lease", Invariants: lease.Invariants}
}
