package workflow

import (
	"context"
	"encoding/json"

	"github.com/fencelab/fencelab/core/claim"
)

type service struct{ jobs *claim.Client }

// start enqueues the workflow for businessKey (idempotent per key).
func (s *service) start(ctx context.Context, businessKey string, input json.RawMessage) (int64, bool, error) {
	in := Input{}
	if len(input) > 0 {
		in.Input = input
	}
	return s.jobs.Enqueue(ctx, s.jobs.Pool(), claim.NewJob{Kind: KindName, BusinessKey: businessKey, Payload: in})
}
