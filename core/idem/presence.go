package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Presence is a process's one long-lived database session, whose only job
// is to exist: an in-flight record stores the session's backend pid and
// start time as its owner, and a retry that finds no such session in
// pg_stat_activity knows the process that claimed the key is gone and
// takes the key over at once (IDEM-I1: the takeover is fenced like the one
// after the lock expiry, so being wrong costs a rolled-back effect, never a
// second one).
//
// Why a session of its own, and not the session of the request's
// connection: a request spans several pooled connections (the claim, the
// effect, a release), each going back to the pool between steps and on to
// other requests, so no pooled session lives and dies with the request. The
// process is what lives and dies with it: when `serve` dies its sockets
// close and the server ends the presence backend at once; when the
// database restarts or fails over every session is gone, the presence one
// with the rest. What the presence cannot see — a partition that leaves
// the backend waiting on a dead peer — still ends at locked_until.
//
// The pid and backend_start pair names one session: pids are reused,
// (pid, start) pairs are not. A record claimed while the process has no
// presence (not yet connected, reconnecting) has no owner and waits out
// its lock as before.
type Presence struct {
	cfg *pgx.ConnConfig

	owner  atomic.Pointer[Owner]
	start  sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Owner names a database session: its backend pid and start time.
type Owner struct {
	PID     int32
	Started time.Time
}

// NewPresence returns the presence of a process whose pool is pool; it
// connects on Start (or the first claim) with the pool's settings, under
// the pool's application_name plus "-presence".
func NewPresence(pool *pgxpool.Pool) *Presence {
	cfg := pool.Config().ConnConfig.Copy()
	if name := cfg.RuntimeParams["application_name"]; name != "" {
		cfg.RuntimeParams["application_name"] = name + "-presence"
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Presence{cfg: cfg, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// Start connects in the background (once); Close ends the session.
func (p *Presence) Start() {
	p.start.Do(func() { go p.run() })
}

// Close ends the presence session and waits for it. Records this process
// still owns look ownerless to other processes from then on, as they would
// after a crash.
func (p *Presence) Close() {
	if p == nil {
		return
	}
	p.Start() // so done is closed even if it never ran
	p.cancel()
	<-p.done
}

// Owner returns the current presence session, or nil while there is none.
func (p *Presence) Owner() *Owner {
	if p == nil {
		return nil
	}
	p.Start()
	return p.owner.Load()
}

// WaitReady blocks until the presence session is up or ctx ends.
func (p *Presence) WaitReady(ctx context.Context) (*Owner, error) {
	p.Start()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if o := p.owner.Load(); o != nil {
			return o, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("idem: presence not connected: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// presenceBackoff bounds the pause between reconnects: short, because
// every claim made meanwhile has no owner and falls back to its lock.
const (
	presenceBackoffMin = 20 * time.Millisecond
	presenceBackoffMax = time.Second
)

func (p *Presence) run() {
	defer close(p.done)
	backoff := presenceBackoffMin
	for p.ctx.Err() == nil {
		up := time.Now()
		err := p.session()
		p.owner.Store(nil)
		if p.ctx.Err() != nil {
			return
		}
		if time.Since(up) > presenceBackoffMax {
			backoff = presenceBackoffMin // the last session lived: not a retry storm
		}
		_ = err // the pool's own errors tell the operator; the presence only follows the database
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, presenceBackoffMax)
	}
}

// session holds one presence session until it breaks or Close.
func (p *Presence) session() error {
	cctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	conn, err := pgx.ConnectConfig(cctx, p.cfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var o Owner
	// LISTEN on a channel nobody notifies: WaitForNotification then blocks
	// on the socket and returns as soon as the session breaks (the server
	// restarted, failed over or terminated the backend), so the process
	// stops naming a dead session as the owner of its new claims.
	cctx, cancel = context.WithTimeout(p.ctx, stepTimeout)
	err = conn.QueryRow(cctx, sqlPresence).Scan(&o.PID, &o.Started)
	if err == nil {
		_, err = conn.Exec(cctx, `LISTEN fencelab_idem_presence`)
	}
	cancel()
	if err != nil {
		return err
	}
	p.owner.Store(&o)
	for {
		if _, err := conn.WaitForNotification(p.ctx); err != nil {
			if errors.Is(err, context.Canceled) && p.ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}
