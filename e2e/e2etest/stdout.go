package e2etest

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// CaptureStdout runs fn with os.Stdout going to a pipe and returns what
// it printed (a bench prints its report there).
func CaptureStdout(t *testing.T, fn func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&buf, r); close(done) }()
	runErr := fn()
	os.Stdout = saved
	require.NoError(t, w.Close())
	<-done
	require.NoError(t, runErr, buf.String())
	return buf.String()
}
