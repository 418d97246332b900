package foundation_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/flashsale/order"
)

// trickled is what a trickling client got back.
type trickled struct {
	name   string
	status int
	code   string
	close  bool
	retry  string
	err    error
}

// trickle sends a request's headers, then its body one byte every 50 ms
// until the server answers (at that pace the body would take seconds, far
// past the deadline), and reads the answer.
func trickle(addr, name, path string, headers map[string]string, body string) trickled {
	out := trickled{name: name}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		out.err = err
		return out
	}
	defer conn.Close()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, len(body))
	for k, v := range headers {
		head += k + ": " + v + "\r\n"
	}
	if _, out.err = io.WriteString(conn, head+"\r\n"); out.err != nil {
		return out
	}
	answered, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < len(body); i++ {
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return // the server has answered and closed
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-answered:
				return
			}
		}
	}()
	defer func() { close(answered); _ = conn.Close(); <-done }()
	// The read deadline only keeps a broken server from hanging the test.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		out.err = err
		return out
	}
	b, _ := io.ReadAll(resp.Body)
	out.status, out.code, out.close, out.retry = resp.StatusCode, problemCode(b), resp.Close, resp.Header.Get("Retry-After")
	return out
}

// Issue 36 item 4: a client that sends its body slowly got 503 overloaded,
// on a debit and on the payment callback, as if the server were at its
// capacity. A write took its admission slot before its body had arrived,
// so tricklers held the slots and crowded out every writer, themselves
// included; the callback's own read answered a timeout 400. Now a write's
// body is read before it asks for a slot, and a body that does not arrive
// in time is the client's doing: 408 body_timeout, connection closed.
//
// The process has one write slot and no waiting line, so a trickler that
// held the slot would turn every other one into a 503. The body deadline
// is set short in the settings, and the clients genuinely trickle past it:
// no sleep stands in for the boundary.
func TestATricklingBodyIs408(t *testing.T) {
	t.Parallel()
	const deadline = 300 * time.Millisecond
	a := e2etest.Start(t, e2etest.Options{Settings: map[string]string{
		app.EnvBodyTimeout:       deadline.String(),
		app.EnvAdmissionLimit:    "1",
		app.EnvAdmissionWaitLine: "0",
		app.EnvLargeBodyTimeout:  "1m",
		app.EnvAdmissionMaxWait:  "1s",
	}})
	user := a.Token(t, "user-0042", httpx.RoleUser)
	addr := strings.TrimPrefix(a.URL, "http://")
	before := snapshot(t, a)

	debit := `{"amount":30,"reason":"` + strings.Repeat("x", 100) + `"}`
	callback := `{"event_id":"ev-1","order_id":1,"state":"paid","amount":30,"pad":"` + strings.Repeat("x", 100) + `"}`
	var wg sync.WaitGroup
	results := make([]trickled, 4)
	for i := range results {
		wg.Go(func() {
			if i%2 == 0 {
				results[i] = trickle(addr, fmt.Sprintf("debit %d", i), "/points/accounts/acct-0042/debits",
					map[string]string{"Authorization": "Bearer " + user, idem.Header: fmt.Sprintf("trickle-%d", i)}, debit)
			} else {
				results[i] = trickle(addr, fmt.Sprintf("payment callback %d", i), order.CallbackPath, nil, callback)
			}
		})
	}
	wg.Wait()
	for _, r := range results {
		require.NoError(t, r.err, "%s: the server answers a trickling body", r.name)
		require.Equal(t, http.StatusRequestTimeout, r.status, "%s: %s", r.name, r.code)
		require.Equal(t, "body_timeout", r.code, r.name)
		require.Empty(t, r.retry, "%s: not an overload", r.name)
		require.True(t, r.close, "%s: the connection is closed after a cut-off body", r.name)
	}
	require.Equal(t, before, snapshot(t, a), "a cut-off body changed no row")
	e2etest.Assert(t, a.Pool)

	// A body that arrives in time is unaffected by the short deadline.
	r := a.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: user,
		Body: `{"amount":1,"reason":"on time"}`, Headers: map[string]string{idem.Header: "on-time-1"}})
	require.Less(t, r.Status, 500, "%s", r.Body)
	require.NotEqual(t, http.StatusRequestTimeout, r.Status, "%s", r.Body)
}
