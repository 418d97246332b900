package notify

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
)

// Only an answer from the channel, or a request that never left, says
// nothing happened; everything else is unknown.
func TestClassifyTellsNothingHappenedFromMaybe(t *testing.T) {
	t.Parallel()
	dial := fmt.Errorf("fakeprovider: POST /v1/effects not sent: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")})
	for name, tc := range map[string]struct {
		err       error
		outcome   string
		permanent bool
	}{
		"answered":        {nil, OutcomeSuccess, false},
		"overloaded":      {&fakeprovider.StatusError{Status: 503}, outcomeFailed, false},
		"rate limited":    {&fakeprovider.StatusError{Status: 429}, outcomeFailed, false},
		"refused":         {&fakeprovider.StatusError{Status: 422}, outcomeFailed, true},
		"unsupported":     {fmt.Errorf("%w: no", fakeprovider.ErrUnsupported), outcomeFailed, true},
		"never left":      {dial, outcomeFailed, false},
		"no answer":       {fmt.Errorf("%w: EOF", fakeprovider.ErrUnknownOutcome), OutcomeUnknown, false},
		"unreadable body": {errors.New("fakeprovider: decoding POST /v1/effects: unexpected EOF"), OutcomeUnknown, false},
	} {
		o := classify(tc.err)
		require.Equal(t, tc.outcome, o.name, name)
		require.Equal(t, tc.permanent, o.permanent, name)
	}
}

func TestBackoffDoublesWithEqualJitterUpToTheCap(t *testing.T) {
	t.Parallel()
	s := &Service{cfg: Config{BackoffBase: 20 * time.Millisecond}}
	for attempt, d := range map[int]time.Duration{1: 20 * time.Millisecond, 2: 40 * time.Millisecond, 4: 160 * time.Millisecond, 60: claim.BackoffMax} {
		for range 100 {
			got := s.backoff(attempt)
			require.GreaterOrEqual(t, got, d/2, "attempt %d", attempt)
			require.LessOrEqual(t, got, d, "attempt %d", attempt)
		}
	}
	s.cfg.BackoffBase = time.Hour // no overflow however large the base
	require.LessOrEqual(t, s.backoff(40), claim.BackoffMax)
}

func TestPreferencesReplaceTheWholeSet(t *testing.T) {
	t.Parallel()
	names, on, err := validatePreferences(PreferencesRequest{Channels: map[string]bool{"push": true}})
	require.NoError(t, err)
	require.Equal(t, []string{"email", "sms", "push"}, names)
	require.Equal(t, []bool{false, false, true}, on)
	_, _, err = validatePreferences(PreferencesRequest{Channels: map[string]bool{"email": true, "fax": true}})
	require.ErrorContains(t, err, "unknown_channel")
	_, _, err = validatePreferences(PreferencesRequest{})
	require.ErrorContains(t, err, "channels_required")
}

// The generated column and the Go function name a task the same way.
func TestDeliveryKeyNamesTheTaskNotTheAttempt(t *testing.T) {
	t.Parallel()
	require.Equal(t, "notify-42-email", DeliveryKey(42, ChannelEmail))
	require.Equal(t, "notify.sms", Channel{Name: ChannelSMS}.Kind())
}
