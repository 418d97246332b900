package fakeprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/fakeprovider"
)

func start(t *testing.T, caps fakeprovider.Capabilities) (*fakeprovider.Server, *fakeprovider.Client) {
	t.Helper()
	s, err := fakeprovider.Start(caps)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, s.Client()
}

func TestIdempotencyKeysReturnTheFirstEffect(t *testing.T) {
	t.Parallel()
	s, c := start(t, fakeprovider.Capabilities{Name: "email", IdempotencyKeys: true})
	ctx := context.Background()
	a, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "k1", Reference: "msg-1", Data: "hi"})
	require.NoError(t, err)
	b, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "k1", Reference: "msg-1", Data: "hi"})
	require.NoError(t, err)
	require.Equal(t, a, b)
	_, err = c.Create(ctx, fakeprovider.CreateRequest{Key: "k1", Reference: "msg-1", Data: "other"})
	var se *fakeprovider.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 422, se.Status)
	require.Len(t, s.Effects(), 1, "one effect for one key")
	require.Equal(t, 3, s.Posts())
}

func TestWithoutIdempotencyKeysEveryPostIsAnEffect(t *testing.T) {
	t.Parallel()
	s, c := start(t, fakeprovider.Capabilities{Name: "push"})
	ctx := context.Background()
	for range 2 {
		_, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "k1", Reference: "msg-1"})
		require.NoError(t, err)
	}
	require.Len(t, s.EffectsFor("msg-1"), 2)
	_, err := c.Find(ctx, fakeprovider.Lookup{Reference: "msg-1"})
	require.ErrorIs(t, err, fakeprovider.ErrUnsupported, "push cannot be queried")
	_, err = c.Close(ctx, "push_1")
	require.ErrorIs(t, err, fakeprovider.ErrUnsupported)
}

func TestFindIsAuthoritative(t *testing.T) {
	t.Parallel()
	_, c := start(t, fakeprovider.Capabilities{Name: "sms", Query: true})
	ctx := context.Background()
	got, err := c.Find(ctx, fakeprovider.Lookup{Reference: "msg-9"})
	require.NoError(t, err)
	require.Empty(t, got, "an authoritative empty answer")
	_, err = c.Create(ctx, fakeprovider.CreateRequest{Reference: "msg-9"})
	require.NoError(t, err)
	got, err = c.Find(ctx, fakeprovider.Lookup{Reference: "msg-9"})
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestDropResponseCommitsTheEffectButTheCallerCannotKnow(t *testing.T) {
	t.Parallel()
	s, c := start(t, fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true, Query: true})
	s.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Key: "wf-1", Times: 1, DropResponse: true})
	ctx := context.Background()
	_, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "wf-1"})
	require.ErrorIs(t, err, fakeprovider.ErrUnknownOutcome)
	require.Len(t, s.EffectsFor("wf-1"), 1, "the effect happened")
	found, err := c.Find(ctx, fakeprovider.Lookup{Key: "wf-1"})
	require.NoError(t, err)
	require.Len(t, found, 1)
	// The retry with the same key is answered from the first effect.
	e, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "wf-1"})
	require.NoError(t, err)
	require.Equal(t, found[0].ID, e.ID)
	require.Len(t, s.Effects(), 1)
	require.Equal(t, 2, s.Requests(fakeprovider.OpCreate))
}

func TestErrorStatusAndDelayFaults(t *testing.T) {
	t.Parallel()
	s, _ := start(t, fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true})
	s.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Times: 2, Status: 503})
	c := s.Client()
	ctx := context.Background()
	for range 2 {
		_, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "a"})
		var se *fakeprovider.StatusError
		require.ErrorAs(t, err, &se)
		require.True(t, se.Retryable())
	}
	require.Empty(t, s.Effects(), "an error status makes no effect")
	_, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "a"})
	require.NoError(t, err, "the fault was used up")

	// A delay longer than the client's timeout: the caller sees an unknown
	// outcome, the party still makes the effect.
	s.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Key: "slow", Delay: 300 * time.Millisecond})
	impatient := fakeprovider.NewClient(s.URL(), 50*time.Millisecond)
	_, err = impatient.Create(ctx, fakeprovider.CreateRequest{Key: "slow"})
	require.ErrorIs(t, err, fakeprovider.ErrUnknownOutcome)
	require.Eventually(t, func() bool { return len(s.EffectsFor("slow")) == 1 }, 5*time.Second, 10*time.Millisecond)
}

func TestUnreachablePartyIsNotAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	s, c := start(t, fakeprovider.Capabilities{Name: "tool"})
	s.Close()
	_, err := c.Create(context.Background(), fakeprovider.CreateRequest{Key: "x"})
	require.Error(t, err)
	require.NotErrorIs(t, err, fakeprovider.ErrUnknownOutcome, "a refused connection sent nothing")
}

// receiver collects verified callbacks.
type receiver struct {
	mu   sync.Mutex
	got  []fakeprovider.Callback
	bad  int
	srv  *httptest.Server
	wait chan struct{}
}

func newReceiver(t *testing.T, secret []byte) *receiver {
	r := &receiver{wait: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := fakeprovider.Verify(secret, req.Header.Get(fakeprovider.SignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
			r.mu.Lock()
			r.bad++
			r.mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var cb fakeprovider.Callback
		_ = json.Unmarshal(body, &cb)
		r.mu.Lock()
		r.got = append(r.got, cb)
		r.mu.Unlock()
		r.wait <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) callbacks() []fakeprovider.Callback {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fakeprovider.Callback(nil), r.got...)
}

func TestPaymentSettlesWithSignedCallbacksThatTestsCanDuplicateAndReorder(t *testing.T) {
	t.Parallel()
	secret := []byte("callback-secret-0123456789")
	rcv := newReceiver(t, secret)
	s, c := start(t, fakeprovider.Capabilities{Name: "pay", IdempotencyKeys: true, Query: true, Close: true, Refund: true,
		Async: true, ManualSettle: true, CallbackURL: rcv.srv.URL, CallbackSecret: secret})
	ctx := context.Background()
	charge, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "order-1", Reference: "order-1", Amount: 500})
	require.NoError(t, err)
	require.Equal(t, fakeprovider.StatusPending, charge.Status)
	other, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "order-2", Reference: "order-2", Amount: 300})
	require.NoError(t, err)

	closed, err := c.Close(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, fakeprovider.StatusClosed, closed.Status)
	<-rcv.wait

	s.HoldCallbacks()
	s.DuplicateCallbacks(1)
	require.NoError(t, s.Settle(charge.ID, fakeprovider.StatusSucceeded))
	_, err = c.Refund(ctx, charge.ID, 200, "refund-1")
	require.NoError(t, err)
	_, err = c.Refund(ctx, charge.ID, 200, "refund-1")
	require.NoError(t, err, "a refund retried with its key is the same refund")
	require.Len(t, s.Refunds(), 1)
	_, err = c.Close(ctx, charge.ID)
	var se *fakeprovider.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 409, se.Status, "a settled charge cannot be closed")

	require.Equal(t, 2, s.ReleaseCallbacks(true))
	s.WaitCallbacks()
	got := rcv.callbacks()
	require.Len(t, got, 5, "closed once, then refunded and succeeded twice each")
	require.Equal(t, "effect.closed", got[0].Type)
	require.Equal(t, []string{"effect.refunded", "effect.refunded", "effect.succeeded", "effect.succeeded"},
		[]string{got[1].Type, got[2].Type, got[3].Type, got[4].Type}, "reordered and duplicated")
	require.Equal(t, got[1].ID, got[2].ID, "a duplicate repeats the event id")
	require.Zero(t, rcv.bad)
}

func TestVerifyRefusesForgedAndReplayedCallbacks(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cr3t-s3cr3t-s3cr3t")
	body := []byte(`{"id":"evt_1"}`)
	now := time.Now()
	h := fakeprovider.Sign(secret, now, body)
	require.NoError(t, fakeprovider.Verify(secret, h, body, now, time.Minute))
	require.ErrorIs(t, fakeprovider.Verify([]byte("other-secret-000000"), h, body, now, time.Minute), fakeprovider.ErrBadSignature)
	require.ErrorIs(t, fakeprovider.Verify(secret, h, []byte(`{"id":"evt_2"}`), now, time.Minute), fakeprovider.ErrBadSignature)
	require.ErrorIs(t, fakeprovider.Verify(secret, h, body, now.Add(10*time.Minute), time.Minute), fakeprovider.ErrStaleSignature)
	require.ErrorIs(t, fakeprovider.Verify(secret, "garbage", body, now, time.Minute), fakeprovider.ErrBadSignature)
	require.True(t, errors.Is(fakeprovider.Verify(secret, "t=1,v1=00", body, now, time.Minute), fakeprovider.ErrBadSignature))
}

// A dropped response on a kept-alive connection is reported to the caller
// as an unknown outcome, never silently resent by net/http (which deems a
// POST with an Idempotency-Key replayable): one Create, one request.
func TestDroppedResponseIsNotResentOnAReusedConnection(t *testing.T) {
	t.Parallel()
	s, c := start(t, fakeprovider.Capabilities{Name: "email", IdempotencyKeys: true})
	ctx := context.Background()
	_, err := c.Create(ctx, fakeprovider.CreateRequest{Key: "k0", Reference: "msg-0"}) // opens the connection
	require.NoError(t, err)
	s.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Times: 1, DropResponse: true})
	_, err = c.Create(ctx, fakeprovider.CreateRequest{Key: "k1", Reference: "msg-1"})
	require.ErrorIs(t, err, fakeprovider.ErrUnknownOutcome)
	require.Equal(t, 2, s.Requests(fakeprovider.OpCreate), "the client did not resend behind the caller's back")
	require.Len(t, s.EffectsFor("k1"), 1, "the effect happened; only its answer was lost")
}

// A closed party accepts nothing: Close closes its listener even when the
// serving goroutine has not started yet (before, a dial could land in the
// kernel's backlog and hang, which made "unreachable" look like "unknown":
// TestUnreachablePartyIsNotAnUnknownOutcome failed a few runs in a
// hundred). Many parties start and close at once so that some are closed
// before their serving goroutine was ever scheduled.
func TestClosedPartyRefusesConnections(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for range 400 {
		wg.Go(func() {
			s, err := fakeprovider.Start(fakeprovider.Capabilities{Name: "closed"})
			if err != nil {
				errs <- err
				return
			}
			addr := strings.TrimPrefix(s.URL(), "http://")
			s.Close()
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				errs <- errors.New("a closed party accepted a connection")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
