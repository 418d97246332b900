// Package require is the lab's own assertions: the testify calls the
// experiments make, with the same names and argument order, failing through
// any T (a *testing.T under go test, the CLI's runner under `fencelab lab
// run`). It exists so that the deployable, which carries the experiments
// for `lab run` and the console, does not carry a test framework: an
// experiment changes only its import line.
package require

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// T is the part of a test an assertion uses; *testing.T and lab.T have it.
type T interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

// fail reports what went wrong, the caller's message if any, and stops the run.
func fail(t T, what string, msgAndArgs []any) {
	t.Helper()
	if m := message(msgAndArgs); m != "" {
		what += "\n\tmessage: " + m
	}
	t.Errorf("%s", what)
	t.FailNow()
}

func message(msgAndArgs []any) string {
	switch len(msgAndArgs) {
	case 0:
		return ""
	case 1:
		if s, ok := msgAndArgs[0].(string); ok {
			return s
		}
		return fmt.Sprintf("%+v", msgAndArgs[0])
	default:
		if f, ok := msgAndArgs[0].(string); ok {
			return fmt.Sprintf(f, msgAndArgs[1:]...)
		}
		return fmt.Sprint(msgAndArgs...)
	}
}

// equal is testify's ObjectsAreEqual: bytes compare as bytes, the rest deeply.
func equal(expected, actual any) bool {
	if expected == nil || actual == nil {
		return expected == actual
	}
	eb, ok1 := expected.([]byte)
	ab, ok2 := actual.([]byte)
	if ok1 && ok2 {
		if eb == nil || ab == nil {
			return eb == nil && ab == nil
		}
		return bytes.Equal(eb, ab)
	}
	return reflect.DeepEqual(expected, actual)
}

// equalValues is equal after converting one side to the other's type (2 and int64(2)).
func equalValues(expected, actual any) bool {
	if equal(expected, actual) {
		return true
	}
	if expected == nil || actual == nil {
		return false
	}
	et, at := reflect.TypeOf(expected), reflect.TypeOf(actual)
	ev, av := reflect.ValueOf(expected), reflect.ValueOf(actual)
	if et.ConvertibleTo(at) && at.ConvertibleTo(et) {
		if isNumber(et) && isNumber(at) {
			// compare in the wider of the two directions, as testify does
			return reflect.DeepEqual(ev.Convert(at).Interface(), actual) &&
				reflect.DeepEqual(expected, av.Convert(et).Interface())
		}
		return reflect.DeepEqual(ev.Convert(at).Interface(), actual)
	}
	return false
}

func isNumber(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// Equal requires expected and actual to be equal (bytes.Equal for []byte, else reflect.DeepEqual).
func Equal(t T, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equal(expected, actual) {
		fail(t, fmt.Sprintf("Not equal:\n\texpected: %#v\n\tactual  : %#v", expected, actual), msgAndArgs)
	}
}

// NotEqual requires expected and actual to differ.
func NotEqual(t T, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if equal(expected, actual) {
		fail(t, fmt.Sprintf("Should not be: %#v", actual), msgAndArgs)
	}
}

// EqualValues is Equal after converting one value to the other's type.
func EqualValues(t T, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equalValues(expected, actual) {
		fail(t, fmt.Sprintf("Not equal:\n\texpected: %#v (%T)\n\tactual  : %#v (%T)", expected, expected, actual, actual), msgAndArgs)
	}
}

// NoError requires err to be nil.
func NoError(t T, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		fail(t, fmt.Sprintf("Received unexpected error:\n\t%+v", err), msgAndArgs)
	}
}

// Error requires err not to be nil.
func Error(t T, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, "An error is expected but got nil.", msgAndArgs)
	}
}

// ErrorIs requires errors.Is(err, target).
func ErrorIs(t T, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, fmt.Sprintf("Target error should be in err chain:\n\texpected: %v\n\tin chain: %v", target, err), msgAndArgs)
	}
}

// True requires value to be true.
func True(t T, value bool, msgAndArgs ...any) {
	t.Helper()
	if !value {
		fail(t, "Should be true", msgAndArgs)
	}
}

// False requires value to be false.
func False(t T, value bool, msgAndArgs ...any) {
	t.Helper()
	if value {
		fail(t, "Should be false", msgAndArgs)
	}
}

// isNil reports a nil interface or a nil pointer, map, slice, chan or func.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Nil requires object to be nil.
func Nil(t T, object any, msgAndArgs ...any) {
	t.Helper()
	if !isNil(object) {
		fail(t, fmt.Sprintf("Expected nil, but got: %#v", object), msgAndArgs)
	}
}

// NotNil requires object not to be nil.
func NotNil(t T, object any, msgAndArgs ...any) {
	t.Helper()
	if isNil(object) {
		fail(t, "Expected value not to be nil.", msgAndArgs)
	}
}

// isEmpty is testify's ObjectsAreEmpty: nil, a zero value, an empty
// collection, or a pointer to an empty value.
func isEmpty(object any) bool {
	if object == nil {
		return true
	}
	v := reflect.ValueOf(object)
	switch v.Kind() {
	case reflect.Chan, reflect.Map, reflect.Slice, reflect.Array, reflect.String:
		return v.Len() == 0
	case reflect.Pointer:
		if v.IsNil() {
			return true
		}
		return isEmpty(v.Elem().Interface())
	default:
		return v.IsZero()
	}
}

// Empty requires object to be empty (see isEmpty).
func Empty(t T, object any, msgAndArgs ...any) {
	t.Helper()
	if !isEmpty(object) {
		fail(t, fmt.Sprintf("Should be empty, but was %v", object), msgAndArgs)
	}
}

// NotEmpty requires object not to be empty.
func NotEmpty(t T, object any, msgAndArgs ...any) {
	t.Helper()
	if isEmpty(object) {
		fail(t, fmt.Sprintf("Should NOT be empty, but was %v", object), msgAndArgs)
	}
}

// Zero requires i to be its type's zero value.
func Zero(t T, i any, msgAndArgs ...any) {
	t.Helper()
	if i != nil && !reflect.ValueOf(i).IsZero() {
		fail(t, fmt.Sprintf("Should be zero, but was %v", i), msgAndArgs)
	}
}

// Len requires object (a string, slice, array, map or chan) to have length n.
func Len(t T, object any, n int, msgAndArgs ...any) {
	t.Helper()
	v := reflect.ValueOf(object)
	switch v.Kind() {
	case reflect.Chan, reflect.Map, reflect.Slice, reflect.Array, reflect.String:
	default:
		fail(t, fmt.Sprintf("\"%v\" could not be applied builtin len()", object), msgAndArgs)
		return
	}
	if v.Len() != n {
		fail(t, fmt.Sprintf("\"%v\" should have %d item(s), but has %d", object, n, v.Len()), msgAndArgs)
	}
}

// Contains requires s (a string, slice, array or map) to contain element
// (a substring, an element, a key).
func Contains(t T, s, element any, msgAndArgs ...any) {
	t.Helper()
	ok, found := contains(s, element)
	if !ok {
		fail(t, fmt.Sprintf("%#v could not be applied builtin len()", s), msgAndArgs)
		return
	}
	if !found {
		fail(t, fmt.Sprintf("%#v does not contain %#v", s, element), msgAndArgs)
	}
}

func contains(s, element any) (ok, found bool) {
	v := reflect.ValueOf(s)
	switch v.Kind() {
	case reflect.String:
		e, isStr := element.(string)
		if !isStr {
			ev := reflect.ValueOf(element)
			if !ev.IsValid() || ev.Kind() != reflect.String {
				return true, false
			}
			e = ev.String()
		}
		return true, strings.Contains(v.String(), e)
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if equal(k.Interface(), element) {
				return true, true
			}
		}
		return true, false
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if equal(v.Index(i).Interface(), element) {
				return true, true
			}
		}
		return true, false
	}
	return false, false
}

// JSONEq requires two JSON documents to be equal once decoded.
func JSONEq(t T, expected, actual string, msgAndArgs ...any) {
	t.Helper()
	var e, a any
	if err := json.Unmarshal([]byte(expected), &e); err != nil {
		fail(t, fmt.Sprintf("Expected value ('%s') is not valid json: %v", expected, err), msgAndArgs)
		return
	}
	if err := json.Unmarshal([]byte(actual), &a); err != nil {
		fail(t, fmt.Sprintf("Input ('%s') needs to be valid json: %v", actual, err), msgAndArgs)
		return
	}
	if !reflect.DeepEqual(e, a) {
		fail(t, fmt.Sprintf("Not equal JSON:\n\texpected: %s\n\tactual  : %s", expected, actual), msgAndArgs)
	}
}

// Eventually requires condition to hold within waitFor, checking it every
// tick (the first check after one tick, as testify does). It polls an
// observable state; it never stands in for a boundary.
func Eventually(t T, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		time.Sleep(tick) // polling an observable state, not standing in for it
		if condition() {
			return
		}
		if time.Now().After(deadline) {
			fail(t, "Condition never satisfied", msgAndArgs)
			return
		}
	}
}

// ordered compares two values of one ordered kind: -1, 0, 1, and false
// when they cannot be compared.
func ordered(e1, e2 any) (int, bool) {
	v1, v2 := reflect.ValueOf(e1), reflect.ValueOf(e2)
	if !v1.IsValid() || !v2.IsValid() || v1.Type() != v2.Type() {
		return 0, false
	}
	if t1, ok := e1.(time.Time); ok {
		return t1.Compare(e2.(time.Time)), true
	}
	switch v1.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp3(v1.Int() < v2.Int(), v1.Int() > v2.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return cmp3(v1.Uint() < v2.Uint(), v1.Uint() > v2.Uint()), true
	case reflect.Float32, reflect.Float64:
		return cmp3(v1.Float() < v2.Float(), v1.Float() > v2.Float()), true
	case reflect.String:
		return strings.Compare(v1.String(), v2.String()), true
	}
	return 0, false
}

func cmp3(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

func compare(t T, e1, e2 any, ok func(int) bool, rel string, msgAndArgs []any) {
	t.Helper()
	c, comparable := ordered(e1, e2)
	if !comparable {
		fail(t, fmt.Sprintf("Elements should be the same ordered type: %T and %T", e1, e2), msgAndArgs)
		return
	}
	if !ok(c) {
		fail(t, fmt.Sprintf("\"%v\" is not %s \"%v\"", e1, rel, e2), msgAndArgs)
	}
}

// Greater requires e1 > e2 (same ordered type).
func Greater(t T, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	compare(t, e1, e2, func(c int) bool { return c > 0 }, "greater than", msgAndArgs)
}

// GreaterOrEqual requires e1 >= e2.
func GreaterOrEqual(t T, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	compare(t, e1, e2, func(c int) bool { return c >= 0 }, "greater than or equal to", msgAndArgs)
}

// Less requires e1 < e2.
func Less(t T, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	compare(t, e1, e2, func(c int) bool { return c < 0 }, "less than", msgAndArgs)
}

// LessOrEqual requires e1 <= e2.
func LessOrEqual(t T, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	compare(t, e1, e2, func(c int) bool { return c <= 0 }, "less than or equal to", msgAndArgs)
}

// Positive requires e > 0 (a number).
func Positive(t T, e any, msgAndArgs ...any) {
	t.Helper()
	v := reflect.ValueOf(e)
	if !v.IsValid() || !isNumber(v.Type()) {
		fail(t, fmt.Sprintf("\"%v\" is not a number", e), msgAndArgs)
		return
	}
	compare(t, e, reflect.Zero(v.Type()).Interface(), func(c int) bool { return c > 0 }, "positive: greater than", msgAndArgs)
}
