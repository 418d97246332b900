package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/fakeprovider"
)

// ORD-O2 starts here: only the channel refusing the charge is a failure.
func TestChargeStatusOnlyARefusalIsAFailure(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&fakeprovider.StatusError{Status: http.StatusPaymentRequired}, payRejected},
		{&fakeprovider.StatusError{Status: http.StatusUnprocessableEntity}, payRejected},
		{&fakeprovider.StatusError{Status: http.StatusTooManyRequests}, payUnavailable},
		{&fakeprovider.StatusError{Status: http.StatusServiceUnavailable}, payUnavailable},
		{&fakeprovider.StatusError{Status: http.StatusInternalServerError}, payUnavailable},
		{fmt.Errorf("wrapped: %w", fakeprovider.ErrUnsupported), payUnavailable},
		{fmt.Errorf("%w: timeout", fakeprovider.ErrUnknownOutcome), PayUnknown},
		{context.DeadlineExceeded, PayUnknown},
		{errors.New("connection reset by peer"), PayUnknown},
	} {
		require.Equal(t, tc.want, chargeStatus(tc.err), "%v", tc.err)
	}
}

func TestLoadConfig(t *testing.T) {
	c, err := LoadConfig(app.Config{Addr: "0.0.0.0:18080"})
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:18080"+CallbackPath, c.CallbackURL, "an unspecified host is called back on loopback")
	require.Equal(t, DefaultConfig().ReconcileAfter, c.ReconcileAfter)

	_, err = LoadConfig(app.Config{Settings: map[string]string{EnvPayURL: "http://127.0.0.1:1"}})
	require.ErrorContains(t, err, EnvCallbackSecret, "a real channel needs the callback secret")
	_, err = LoadConfig(app.Config{Settings: map[string]string{EnvCallbackSecret: "short"}})
	require.Error(t, err)
	_, err = LoadConfig(app.Config{Settings: map[string]string{EnvPayURL: "ftp://x"}})
	require.Error(t, err)
	c, err = LoadConfig(app.Config{Settings: map[string]string{EnvPayURL: "http://127.0.0.1:1",
		EnvCallbackSecret: "0123456789abcdef", EnvReconcileAfter: "0s"}})
	require.NoError(t, err)
	require.Equal(t, []byte("0123456789abcdef"), c.CallbackSecret)
	require.Zero(t, c.ReconcileAfter)
}

func TestParseCallbackIsStrict(t *testing.T) {
	ok := `{"id":"evt_1","type":"effect.succeeded","created":"2030-01-01T00:00:00Z",` +
		`"effect":{"id":"pay_1","key":"k","reference":"fso_1","amount":1990,"status":"succeeded","refunded":0,"created_at":"2030-01-01T00:00:00Z"}}`
	cb, err := parseCallback([]byte(ok))
	require.NoError(t, err)
	require.Equal(t, "pay_1", cb.Effect.ID)
	for _, bad := range []string{
		``, `{`, `[]`, `{"id":"evt_1"}`, ok + `{}`,
		`{"id":"","type":"effect.succeeded","effect":{"id":"pay_1","reference":"r","status":"succeeded"}}`,
		`{"id":"e","type":"effect.paid","effect":{"id":"pay_1","reference":"r","status":"succeeded"}}`,
		`{"id":"e","type":"effect.succeeded","effect":{"id":"pay_1","reference":"r","status":"won"}}`,
		`{"id":"e","type":"effect.succeeded","effect":{"id":"pay_1","reference":"r","status":"succeeded","amount":-1}}`,
		`{"id":"e","type":"effect.succeeded","extra":1,"effect":{"id":"pay_1","reference":"r","status":"succeeded"}}`,
	} {
		_, err := parseCallback([]byte(bad))
		require.ErrorIs(t, err, errCallbackMalformed, bad)
	}
}

func TestSignedAtReadsTheVerifiedTimestamp(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	h := fakeprovider.Sign([]byte("0123456789abcdef"), now, []byte("{}"))
	require.Equal(t, now, signedAt(h))
}

// The loopback channel speaks only about the charges it made: for another
// process's order its "none" would close a paying order.
func TestLoopbackAnswersOnlyForItsOwnCharges(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CallbackSecret, cfg.SettleAfter = []byte("0123456789abcdef"), time.Hour // no callback within the test
	ch := newChannel(cfg, slog.Default())
	_, err := ch.Find(t.Context(), fakeprovider.Lookup{Reference: "fso_elsewhere"})
	require.ErrorIs(t, err, errForeignReference)
	e, err := ch.Create(t.Context(), fakeprovider.CreateRequest{Key: "fso_mine:charge", Reference: "fso_mine", Amount: Price})
	require.NoError(t, err)
	found, err := ch.Find(t.Context(), fakeprovider.Lookup{Reference: "fso_mine"})
	require.NoError(t, err)
	require.Equal(t, []string{e.ID}, []string{found[0].ID})
}

func TestMovesAreTheSpecsStateMachine(t *testing.T) {
	require.Equal(t, "('CLOSED', 'PAID_LATE'), ('CREATED', 'CLOSED'), ('CREATED', 'PAYING'), ('FAILED', 'PAID_LATE'), "+
		"('PAID_LATE', 'CONFIRMED_LATE'), ('PAID_LATE', 'REFUNDING'), ('PAYING', 'CLOSED'), ('PAYING', 'FAILED'), "+
		"('PAYING', 'PAID'), ('PAYING', 'PAID_LATE'), ('REFUNDING', 'REFUNDED')", movesValues())
}
