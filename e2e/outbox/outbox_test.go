package outbox_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/e2e/e2etest"
	outboxlab "github.com/fencelab/fencelab/lab/outbox"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestExperiments(t *testing.T) { e2etest.Experiments(t, outboxlab.Experiments) }

// The consumer table is an admin view; its lag is also a metric.
func TestOutboxConsumersEndpointIsAdminOnly(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	ctx := context.Background()
	require.NoError(t, outbox.Register(ctx, a.Pool, outbox.DemoConsumer()))
	var msgs []outbox.Message
	for k := range 100 {
		msgs = append(msgs, outbox.Message{Topic: outbox.DemoTopic, Key: fmt.Sprintf("k-%02d", k), Payload: outbox.DemoPayload{N: 1}})
	}
	require.NoError(t, pg.InTx(ctx, a.Pool, func(tx pgx.Tx) error {
		_, err := outbox.AppendMany(ctx, tx, msgs)
		return err
	}))

	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/outbox/consumers", Token: a.Token(t, "user-0042", httpx.RoleUser)})
	require.Equal(t, 403, r.Status)
	r = a.Do(t, e2etest.Req{Method: "GET", Path: "/outbox/consumers"})
	require.Equal(t, 401, r.Status)

	r = a.Do(t, e2etest.Req{Method: "GET", Path: "/outbox/consumers", Token: a.Token(t, "admin-0001", httpx.RoleAdmin)})
	require.Equal(t, 200, r.Status, string(r.Body))
	var body struct {
		Consumers []outbox.ConsumerStatus `json:"consumers"`
	}
	r.JSON(t, &body)
	require.Len(t, body.Consumers, 1)
	require.Equal(t, outbox.DemoConsumerName, body.Consumers[0].Name)
	require.EqualValues(t, 100, body.Consumers[0].LagEvents)

	m := a.Do(t, e2etest.Req{Method: "GET", Path: "/metrics"})
	require.Contains(t, string(m.Body), `fencelab_outbox_lag_events{consumer="outbox.demo"} 100`)

	// `fencelab check outbox` runs the invariants and shows positions and lag.
	cmd := exec.Command(e2etest.Binary(t), "check", "outbox")
	cmd.Env = e2etest.ChildEnv(a.DBURL)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "ok    OUTBOX-I2")
	require.Regexp(t, `outbox\.demo\s+outbox\.demo\s+\(0,0\)\s+0\s+100\s`, string(out))
	e2etest.Assert(t, a.Pool, "outbox")
}
