package notify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
)

// PointAfterCall is the experiments' pause point inside a channel call: the
// request has reached the channel and its answer (or its absence) is back,
// and the worker has recorded nothing yet — from the database's side the
// worker is still in the call. The key is the task's delivery key.
const PointAfterCall = "notify.after_call"

// kinds returns one claim kind per channel. The channel's contract decides
// what the engine may do when an attempt's outcome is in doubt (NTF-I4):
//
//   - keys (email): sending again with the same key cannot make a second
//     message, so a lapsed lease goes straight back to ready
//     (SideEffects false) and a call without an answer is retried with
//     backoff, the same key every time;
//   - query only (sms): a lapsed lease or a call without an answer makes the
//     task unknown; the resolver asks the channel (lookUp) and the engine
//     resends only on its authoritative "absent";
//   - neither (push): unknown, and with nothing to ask the resolver sends
//     the task to needs_review: automatic handling stops and a person
//     decides (POST /notify/review/{task}/resolve).
func (s *Service) kinds() []claim.Kind {
	out := make([]claim.Kind, 0, len(Channels))
	for _, ch := range Channels {
		k := claim.Kind{
			Name:        ch.Kind(),
			SideEffects: !ch.Keys,
			// The task is the job's state (NTF-I1): the job lives as
			// long as its notification (docs/DATA.md).
			KeepFinished: true,
			OnClaim:      s.stillWanted,
			Handle:       s.sendVia(ch),
			MaxAttempts:  s.cfg.MaxAttempts,
			Backoff:      s.backoff,
		}
		if ch.Query {
			k.Resolve = s.lookUpVia(ch)
		}
		out = append(out, k)
	}
	return out
}

// PurgeKindName is the periodic kind that enforces Config.Retention.
const PurgeKindName = "notify.purge"

// purgeKind is notify.purge: one run per slot across all processes,
// deleting finished notifications past the retention (Purge).
func (s *Service) purgeKind() claim.Kind {
	return claim.RetentionKind(PurgeKindName, s.cfg.Retention, func(ctx context.Context) (any, error) {
		n, err := Purge(ctx, s.pool, s.cfg.Retention)
		return claim.Deleted(n), err
	})
}

// stillWanted is NTF-I5: inside the claim transaction, a task whose channel
// the user has turned off is cancelled and never sent.
func (s *Service) stillWanted(ctx context.Context, tx pgx.Tx, j claim.Job) error {
	channel, on, err := preferenceAtClaim(ctx, tx, j.ID)
	if err != nil {
		return err
	}
	if !on {
		if channel == "" {
			return claim.Cancel("NTF-I5: the user has no preference for this channel any more")
		}
		return claim.Cancel("NTF-I5: the user turned " + channel + " off before the claim")
	}
	return nil
}

// outcome is what one call came to.
type outcome struct {
	name      string // OutcomeSuccess, OutcomeFailed or OutcomeUnknown
	permanent bool   // failed, and retrying cannot help
	err       error
}

// classify reads a channel call's error. Only an answer from the channel, or
// a request that provably never left, says nothing happened; everything
// else — no answer, a cut connection, an answer we could not read — may hide
// a delivered message, and is unknown.
func classify(err error) outcome {
	var se *fakeprovider.StatusError
	var op *net.OpError
	switch {
	case err == nil:
		return outcome{name: OutcomeSuccess}
	case errors.As(err, &se):
		return outcome{name: outcomeFailed, permanent: !se.Retryable(), err: err}
	case errors.Is(err, fakeprovider.ErrUnsupported), errors.Is(err, fakeprovider.ErrNotFound):
		return outcome{name: outcomeFailed, permanent: true, err: err}
	case errors.As(err, &op) && op.Op == "dial":
		return outcome{name: outcomeFailed, err: err}
	default:
		return outcome{name: OutcomeUnknown, err: err}
	}
}

func (o outcome) detail() string {
	if o.err == nil {
		return ""
	}
	return o.err.Error()
}

// sendVia is the handler of a channel's tasks: one send, recorded before and
// after, and the channel's policy for what comes next.
func (s *Service) sendVia(ch Channel) func(context.Context, *claim.Job) error {
	snd := s.senders[ch.Name]
	return func(ctx context.Context, j *claim.Job) error {
		// NTF-I3: the attempt row exists before the request leaves, under
		// the token this worker holds (NTF-I2: a lapsed holder stops here).
		a, err := beginAttempt(ctx, s.pool, *j, opSend, claim.StateRunning, !ch.Keys)
		if err != nil {
			return err
		}
		if a.id == 0 {
			// NTF-I4: without keys, a send that may already have delivered
			// is settled by asking the channel or by a person, never by
			// sending again.
			return claim.Unknown(errors.New("an earlier send may have delivered and nothing has settled it: not resending"))
		}
		req := fakeprovider.CreateRequest{Reference: a.key, Data: a.msg}
		if ch.Keys {
			// NTF-I4: the key names the task, never the attempt, so every
			// resend — by this worker or a later holder — is the same message.
			req.Key = a.key
		}
		callCtx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		effect, callErr := snd.Create(callCtx, req)
		cancel()
		if err := s.faults.Hit(ctx, PointAfterCall, a.key); err != nil {
			// Stopped before recording what the channel said, as a crash
			// would: the attempt stays pending and the outcome is unknown.
			return s.afterUnknown(ch, j, fmt.Errorf("stopped inside the call: %w", err))
		}
		o := classify(callErr)
		s.m.call(ch.Name, opSend, o.name)
		// The outcome is written even by a holder that lost its lease
		// meanwhile: the call happened, and the record must say so.
		if err := finishAttempt(context.WithoutCancel(ctx), s.pool, a.id, o.name, effect.ID, o.detail()); err != nil {
			s.log.Warn("notify: cannot record a call's outcome; treating it as unknown", "job", j.ID, "err", err)
			return s.afterUnknown(ch, j, err)
		}
		switch o.name {
		case OutcomeSuccess:
			return j.SetResult(Result{EffectID: effect.ID, Attempt: a.no})
		case OutcomeUnknown:
			return s.afterUnknown(ch, j, o.err)
		}
		if (o.permanent || j.Attempts >= j.MaxAttempts) && a.maybeSent {
			// "Failed" would say nothing was sent, but an earlier send may
			// have delivered: unknown, so the channel is asked or a person
			// decides.
			return claim.Unknown(fmt.Errorf("giving up, but an earlier send may have delivered: %w", o.err))
		}
		if o.permanent {
			return claim.Permanent(o.err)
		}
		return o.err // the channel did nothing: retried after backoff
	}
}

// afterUnknown is NTF-I4 for a send that may or may not have been delivered.
func (s *Service) afterUnknown(ch Channel, j *claim.Job, err error) error {
	if ch.Keys && j.Attempts < j.MaxAttempts {
		return fmt.Errorf("no answer; resending with the same key: %w", err)
	}
	// Query only: the resolver asks. Neither (or keys with no attempt
	// left): the resolver has nothing to ask and a person decides.
	return claim.Unknown(err)
}

// lookUpTries bounds the queries one resolution makes before it gives up
// (a failed query is not an answer: the task then goes to review).
const lookUpTries = 3

// lookUpVia is the channel's authoritative query for an unknown task: found
// → delivered, absent → resent by the engine, no answer → needs_review.
// Every query is an attempt row, under the resolver's token.
func (s *Service) lookUpVia(ch Channel) func(context.Context, claim.Job) (claim.Resolution, error) {
	snd := s.senders[ch.Name]
	return func(ctx context.Context, j claim.Job) (claim.Resolution, error) {
		var last error
		for try := range lookUpTries {
			if try > 0 {
				select {
				case <-ctx.Done():
					return claim.Resolution{}, ctx.Err()
				case <-time.After(time.Duration(try) * 100 * time.Millisecond):
				}
			}
			a, err := beginAttempt(ctx, s.pool, j, OpQuery, claim.StateUnknown, false)
			if err != nil {
				return claim.Resolution{}, err
			}
			callCtx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
			found, callErr := snd.Find(callCtx, fakeprovider.Lookup{Reference: a.key})
			cancel()
			o := classify(callErr)
			s.m.call(ch.Name, OpQuery, o.name)
			effectID := ""
			if len(found) > 0 {
				effectID = found[0].ID
			}
			if err := finishAttempt(context.WithoutCancel(ctx), s.pool, a.id, o.name, effectID, o.detail()); err != nil {
				return claim.Resolution{}, err
			}
			if o.name == OutcomeSuccess {
				if effectID != "" {
					return claim.Found(Result{EffectID: effectID, Attempt: a.no, Found: true}), nil
				}
				return claim.Absent(), nil
			}
			last = o.err
			if o.permanent {
				break
			}
		}
		return claim.Resolution{}, fmt.Errorf("%s lookup got no answer: %w", ch.Name, last)
	}
}

// backoff is claim.DefaultBackoff's equal jitter from the configured base:
// attempt n waits a random duration in [d/2, d], d = min(BackoffMax,
// base·2^(n-1)). The email channel's keys must outlive the whole schedule
// (a real provider keeps them for about a day; 5 attempts take minutes).
func (s *Service) backoff(attempt int) time.Duration {
	d := s.cfg.BackoffBase
	for i := 1; i < attempt && d < claim.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, claim.BackoffMax)
	return d/2 + rand.N(d/2+1)
}
