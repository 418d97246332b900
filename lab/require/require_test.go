package require

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"testing"
	"time"
)

// fakeT records a failure and stops the goroutine, as FailNow does.
type fakeT struct{ failed bool }

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) FailNow()              { f.failed = true; runtime.Goexit() }
func fails(assert func(t T)) (failed bool) {
	f := &fakeT{}
	done := make(chan struct{})
	go func() { defer close(done); assert(f) }()
	<-done
	return f.failed
}

// Each assertion passes and fails exactly where testify's does, for the
// values the experiments give it.
func TestAssertionsMatchTestify(t *testing.T) {
	type pair struct{ A, B int }
	cases := []struct {
		name string
		pass func(T)
		fail func(T)
	}{
		{"Equal", func(t T) { Equal(t, pair{1, 2}, pair{1, 2}) }, func(t T) { Equal(t, 1, int64(1)) }},
		{"Equal bytes", func(t T) { Equal(t, []byte("a"), []byte("a")) }, func(t T) { Equal(t, []byte{}, []byte(nil)) }},
		{"NotEqual", func(t T) { NotEqual(t, 1, 2) }, func(t T) { NotEqual(t, "a", "a") }},
		{"EqualValues", func(t T) { EqualValues(t, 3, int64(3)) }, func(t T) { EqualValues(t, 3, int64(4)) }},
		{"NoError", func(t T) { NoError(t, nil) }, func(t T) { NoError(t, errors.New("x")) }},
		{"Error", func(t T) { Error(t, errors.New("x")) }, func(t T) { Error(t, nil) }},
		{"ErrorIs", func(t T) { ErrorIs(t, fmt.Errorf("w: %w", fs.ErrNotExist), fs.ErrNotExist) }, func(t T) { ErrorIs(t, errors.New("x"), fs.ErrNotExist) }},
		{"True", func(t T) { True(t, true) }, func(t T) { True(t, false) }},
		{"False", func(t T) { False(t, false) }, func(t T) { False(t, true) }},
		{"Nil", func(t T) { var p *int; Nil(t, p) }, func(t T) { Nil(t, 0) }},
		{"NotNil", func(t T) { NotNil(t, &pair{}) }, func(t T) { var m map[int]int; NotNil(t, m) }},
		{"Empty", func(t T) { Empty(t, []int{}); Empty(t, ""); Empty(t, 0) }, func(t T) { Empty(t, []int{1}) }},
		{"NotEmpty", func(t T) { NotEmpty(t, "a") }, func(t T) { NotEmpty(t, map[int]int{}) }},
		{"Zero", func(t T) { Zero(t, int64(0)); Zero(t, time.Time{}) }, func(t T) { Zero(t, 1) }},
		{"Len", func(t T) { Len(t, []int{1, 2}, 2); Len(t, "abc", 3) }, func(t T) { Len(t, []int{1}, 2) }},
		{"Contains", func(t T) {
			Contains(t, "hello", "ell")
			Contains(t, []string{"a"}, "a")
			Contains(t, map[string]int{"k": 1}, "k")
		}, func(t T) { Contains(t, []int{1}, 2) }},
		{"JSONEq", func(t T) { JSONEq(t, `{"a":1,"b":[2]}`, `{"b":[2], "a":1}`) }, func(t T) { JSONEq(t, `{"a":1}`, `{"a":2}`) }},
		{"Greater", func(t T) { Greater(t, 2, 1); Greater(t, "b", "a") }, func(t T) { Greater(t, 1, 1) }},
		{"Greater types", func(t T) { Greater(t, int64(2), int64(1)) }, func(t T) { Greater(t, int64(2), 1) }},
		{"GreaterOrEqual", func(t T) { GreaterOrEqual(t, 1.0, 1.0) }, func(t T) { GreaterOrEqual(t, 0.5, 1.0) }},
		{"Less", func(t T) { Less(t, 1, 2) }, func(t T) { Less(t, 2, 2) }},
		{"LessOrEqual", func(t T) { LessOrEqual(t, time.Unix(1, 0), time.Unix(1, 0)) }, func(t T) { LessOrEqual(t, time.Unix(2, 0), time.Unix(1, 0)) }},
		{"Positive", func(t T) { Positive(t, int64(1)); Positive(t, 0.1) }, func(t T) { Positive(t, 0) }},
		{"Eventually", func(t T) { n := 0; Eventually(t, func() bool { n++; return n > 2 }, time.Minute, time.Millisecond) }, func(t T) { Eventually(t, func() bool { return false }, 5*time.Millisecond, time.Millisecond) }},
	}
	for _, c := range cases {
		if fails(c.pass) {
			t.Errorf("%s: failed where testify passes", c.name)
		}
		if !fails(c.fail) {
			t.Errorf("%s: passed where testify fails", c.name)
		}
	}
}

// A message given as a format and its arguments reaches the failure.
func TestMessageIsFormatted(t *testing.T) {
	if got := message([]any{"row %d of %s", 3, "t"}); got != "row 3 of t" {
		t.Fatalf("message = %q", got)
	}
}
