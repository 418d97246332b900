// Package workflow is chapter 14's demo: a durable job that calls an
// external tool exactly once per business key, although any number of
// workers race for it, leases lapse and owners change.
//
// The job is claimed inside the database (core/claim); the tool is called
// after the claim commits, with an idempotency key derived from the business
// key alone, so every attempt and every later owner asks the tool for the
// same effect; the completion is fenced, so an owner whose lease lapsed
// cannot commit its late result. When the call's outcome is unknown (no
// response), the job waits for the resolver, which asks the tool by the same
// key: found → succeeded, authoritatively absent → claimed again.
package workflow

import (
	"context"
	"errors"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
)

// KindName is the job kind.
const KindName = "workflow"

// Tool is what the workflow calls: *fakeprovider.Client in every setting.
type Tool interface {
	Create(ctx context.Context, r fakeprovider.CreateRequest) (fakeprovider.Effect, error)
	Find(ctx context.Context, l fakeprovider.Lookup) ([]fakeprovider.Effect, error)
}

// Input is a workflow job's payload.
type Input struct {
	Input any `json:"input,omitempty"`
}

// Result is stored in job.result.
type Result struct {
	EffectID string `json:"effect_id"`
	Status   string `json:"status"`
}

// IdempotencyKey is the tool's idempotency key for a workflow. It depends on
// the business key only — never on the attempt, owner or fence — so a retry,
// a recovered job and a stale owner all name the same effect.
func IdempotencyKey(businessKey string) string { return "workflow:" + businessKey }

// NewKind returns the workflow kind calling tool.
func NewKind(tool Tool) claim.Kind {
	return claim.Kind{
		Name: KindName,
		// A lapsed lease may hide a tool call that happened: recover to
		// unknown and ask the tool, never just run it again blindly.
		SideEffects: true,
		Handle: func(ctx context.Context, j *claim.Job) error {
			var in Input
			if err := j.UnmarshalPayload(&in); err != nil {
				return claim.Permanent(err)
			}
			e, err := tool.Create(ctx, fakeprovider.CreateRequest{
				Key: IdempotencyKey(j.BusinessKey), Reference: j.BusinessKey, Data: in.Input,
			})
			var se *fakeprovider.StatusError
			switch {
			case errors.Is(err, fakeprovider.ErrUnknownOutcome) || (err != nil && ctx.Err() != nil):
				return claim.Unknown(err)
			case errors.As(err, &se) && !se.Retryable():
				return claim.Permanent(err)
			case err != nil:
				return err // retried with backoff, same key
			}
			return j.SetResult(Result{EffectID: e.ID, Status: e.Status})
		},
		// The authoritative query: the tool's ledger by the same key.
		Resolve: func(ctx context.Context, j claim.Job) (claim.Resolution, error) {
			found, err := tool.Find(ctx, fakeprovider.Lookup{Key: IdempotencyKey(j.BusinessKey)})
			if err != nil {
				return claim.Resolution{}, err // cannot ask: needs_review
			}
			if len(found) == 0 {
				return claim.Absent(), nil
			}
			return claim.Found(Result{EffectID: found[0].ID, Status: found[0].Status}), nil
		},
	}
}
