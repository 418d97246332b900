package shortlink

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// listen applies invalidations from other replicas (and this one) until
// ctx ends: a revoked or newly created code is forgotten as soon as its
// NOTIFY arrives, shortening the revocation window from CacheTTL to about
// the notification's latency.
//
// SL-I2 does not rely on this: a notification sent while this connection
// is down is simply lost, and the TTL still bounds what the cache serves.
// Each (re)connection purges the cache, so an outage of the feed costs
// misses, not staleness beyond what the TTL allows anyway.
//
// It holds one dedicated connection, outside the main pool's budget.
func (s *Service) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.db.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sqlListen); err != nil {
		return err
	}
	s.resolver.purge()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		s.resolver.invalidate(n.Payload)
		s.m.invalidations.Inc()
	}
}
