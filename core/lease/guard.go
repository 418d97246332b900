package lease

import (
	"context"
	"fmt"

	"github.com/fencelab/fencelab/core/pg"
)

// Guard is the resource side of fencing, and the only part of this package
// that is a guarantee. Call it inside the transaction that writes the
// protected resource, before or after the write but in the same tx:
//
//	err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
//		if err := lease.Guard(ctx, tx, "report_output:2026-05-01", l); err != nil {
//			return err // ErrStaleFence: roll back, nothing changes
//		}
//		_, err := tx.Exec(ctx, `UPDATE report_output SET … WHERE …`)
//		return err
//	})
//
// It admits the write when no write to resource has carried a higher fence
// of l's lease, and records l.Fence as the highest seen; otherwise it
// returns ErrStaleFence. Because the comparison and the write commit or
// roll back together, and the guard row's lock orders concurrent writers,
// a holder that stalled past its expiry and resumed cannot overwrite the
// work of the holder that replaced it — even though it passed every check
// it made before the stall.
//
// Guard does not look at the lease table: a resource judges the token it is
// shown, not the lease service's opinion (which may be stale, or live in
// another system). A write whose lease has expired but whose fence is still
// the highest is admitted; nobody newer has acted.
//
// resource names the protected thing ("report_output:2026-05-01"); it is
// bound to l.Name on its first write, and a later write under another lease
// returns ErrOtherLease.
func Guard(ctx context.Context, tx pg.Querier, resource string, l Lease) error {
	if err := validName("resource", resource); err != nil {
		return err
	}
	if err := validName("lease name", l.Name); err != nil {
		return err
	}
	if l.Fence <= 0 {
		return fmt.Errorf("%w: fence %d was never granted", ErrInvalid, l.Fence)
	}
	var admitted int64
	err := tx.QueryRow(ctx, sqlGuard, resource, l.Name, l.Fence, l.Holder).Scan(&admitted)
	if err = pg.MapError(err); err == nil {
		return nil
	} else if !isNoRows(err) {
		return fmt.Errorf("lease: guard %q: %w", resource, err)
	}
	var (
		leaseName, holder string
		highest           int64
	)
	if err := tx.QueryRow(ctx, sqlGuardState, resource).Scan(&leaseName, &highest, &holder); err != nil {
		return fmt.Errorf("lease: guard %q: read refusing state: %w", resource, pg.MapError(err))
	}
	if leaseName != l.Name {
		return fmt.Errorf("%w: %q is guarded by lease %q, not %q", ErrOtherLease, resource, leaseName, l.Name)
	}
	return fmt.Errorf("%w: %q has admitted fence %d (by %q); %q's fence %d is older",
		ErrStaleFence, resource, highest, holder, l.Holder, l.Fence)
}
