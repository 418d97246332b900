package httpx_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
)

// nested is a post whose body is an array nested depth deep: the probe of
// issue 36 (100,000 deep is 200 KB).
func nested(depth int) []byte {
	return []byte(`{"reason":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
}

// allocated is the number of bytes f allocates on the heap, on its second
// run (the first may initialise package state). The test that calls it
// does not run in parallel, so no other test allocates meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	f()
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Issue 36 item 1: a body nested 100,000 deep (200 KB) was walked level by
// level, with a longer path string built at each: no answer after 40 s and
// gigabytes of memory, quadratic in the depth. It is refused with 400
// body_too_deep by a scan of the bytes before any decoder runs, and what
// the refusal allocates does not grow with the depth. The bound is on bytes
// allocated, not on time: a slow machine cannot make it flaky, and a
// quadratic walk cannot pass it.
func TestDeepJSONIsRefusedBeforeItGrows(t *testing.T) {
	// Not parallel: allocated reads process-wide counters.
	for _, depth := range []int{httpx.MaxJSONDepth, 1000, 100_000, 500_000} {
		body := nested(depth)
		var err error
		var d debit
		n := allocated(func() { err = httpx.DecodeJSON(body, &d) })
		p, ok := err.(*httpx.Problem)
		require.True(t, ok, "depth %d: a problem, got %v", depth, err)
		require.Equal(t, 400, p.Status, "depth %d", depth)
		require.Equal(t, "body_too_deep", p.Code, "depth %d", depth)
		// The refusal is a problem document and nothing else: a few hundred
		// bytes at any depth (the quadratic walk allocated ~20 GB at 100,000);
		// the bound leaves room for the runtime's own bookkeeping.
		t.Logf("depth %d (%d bytes of body): refused with %d bytes allocated", depth, len(body), n)
		require.Less(t, n, uint64(16<<10), "depth %d (%d bytes of body): %d bytes allocated", depth, len(body), n)
	}

	// The boundary: MaxJSONDepth levels decode, one more is refused. Free-
	// form data (meta) takes any shape up to the limit.
	atLimit := `{"meta":` + strings.Repeat(`{"a":`, httpx.MaxJSONDepth-2) + `1` + strings.Repeat(`}`, httpx.MaxJSONDepth-2) + `}`
	var d debit
	require.NoError(t, httpx.DecodeJSON([]byte(atLimit), &d))
	over := `{"meta":` + strings.Repeat(`{"a":`, httpx.MaxJSONDepth-1) + `1` + strings.Repeat(`}`, httpx.MaxJSONDepth-1) + `}`
	err := httpx.DecodeJSON([]byte(over), &d)
	require.Error(t, err)
	require.Equal(t, "body_too_deep", err.(*httpx.Problem).Code)
	// Brackets inside strings are text, not nesting.
	require.NoError(t, httpx.DecodeJSON([]byte(`{"reason":"`+strings.Repeat(`[{\"`, 1000)+`"}`), &d))

	// Every other shape costs in proportion to its size: ten times the
	// bytes may allocate about ten times as much, never a hundred.
	for name, shape := range map[string]func(n int) string{
		"many keys":   func(n int) string { return `{"meta":{` + keys(n) + `}}` },
		"wide array":  func(n int) string { return `{"items":[` + strings.Repeat(`{"sku":"a"},`, n) + `{"sku":"a"}]}` },
		"long string": func(n int) string { return `{"reason":"` + strings.Repeat("x", 12*n) + `"}` },
		"deep and wide": func(n int) string {
			return `{"meta":{"a":` + strings.Repeat(`[`, 60) + strings.Repeat(`1,`, n) + `1` + strings.Repeat(`]`, 60) + `}}`
		},
	} {
		small, large := []byte(shape(8_000)), []byte(shape(80_000))
		var errSmall, errLarge error
		a := allocated(func() { var d debit; errSmall = httpx.DecodeJSON(small, &d) })
		b := allocated(func() { var d debit; errLarge = httpx.DecodeJSON(large, &d) })
		require.NoError(t, errSmall, name)
		require.NoError(t, errLarge, name)
		require.Less(t, b, 20*a, "%s: %d bytes allocated for %d bytes of body, %d for %d", name, a, len(small), b, len(large))
		t.Logf("%s: %d bytes allocated for %d bytes of body (%.0f×), %d for %d", name, a, len(small), float64(b)/float64(len(large)), b, len(large))
		require.Less(t, b, uint64(100*len(large)), "%s: %d bytes allocated for %d bytes of body", name, b, len(large))
	}

	// Over HTTP: the deep probe is a 400 problem, as every client mistake.
	srv := bindServer(t, httpx.Options{})
	resp, p, raw := post(t, srv.URL+"/debit", string(nested(100_000)))
	require.Equal(t, 400, resp.StatusCode, raw)
	require.Equal(t, "body_too_deep", p.Code, raw)
}

func keys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k`)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`":1`)
	}
	return b.String()
}
