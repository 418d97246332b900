package points

import (
	"errors"
	"testing"
)

// FuzzDecodeCursor: the entries cursor never panics; what it accepts is a
// positive id that encodes back to the cursor the server would send.
func FuzzDecodeCursor(f *testing.F) {
	for _, s := range []string{"", encodeCursor(42), "djE6LTE", "djE6MA", "!!", "x\x00y", "\xed\xa0\x80", "djE6OTk5OTk5OTk5OTk5OTk5OTk5OTk5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := decodeCursor(s)
		switch {
		case err != nil:
			if !errors.Is(err, errInvalidCursor) {
				t.Fatalf("decodeCursor(%q): %v", s, err)
			}
		case s != "" && (n < 1 || encodeCursor(n) != s):
			t.Fatalf("decodeCursor(%q) = %d, which encodes to %q", s, n, encodeCursor(n))
		}
	})
}
