package rel

import (
	"errors"
	"testing"
	"time"
)

// A cursor survives its opaque form exactly (microseconds, as PostgreSQL
// stores timestamps), and anything that is not one is refused.
func TestCursorRoundTripAndRefusals(t *testing.T) {
	c := postCursor{CreatedAt: time.Date(2026, 11, 29, 22, 13, 3, 625922000, time.UTC), PostID: 42}
	got, ok, err := DecodeCursor(c.encode())
	if err != nil || !ok || !got.CreatedAt.Equal(c.CreatedAt) || got.PostID != c.PostID {
		t.Fatalf("round trip: got %+v ok=%v err=%v, want %+v", got, ok, err, c)
	}
	if _, ok, err := DecodeCursor(""); ok || err != nil {
		t.Fatalf("empty cursor: ok=%v err=%v, want the first page", ok, err)
	}
	zero := postCursor{CreatedAt: c.CreatedAt}.encode()
	for _, bad := range []string{"!!", "bm90LWEtY3Vyc29y", c.encode() + "A", zero} {
		if _, _, err := DecodeCursor(bad); !errors.Is(err, errInvalidCursor) {
			t.Errorf("DecodeCursor(%q) = %v, want ErrInvalidCursor", bad, err)
		}
	}
}
