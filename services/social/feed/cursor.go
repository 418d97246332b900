package feed

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"math"
	"time"
)

// position is where a scroll through the feed stands. Newest first, the
// next page holds:
//
//   - the posts strictly before (At, ID), and
//   - the late arrivals: posts settled after the previous page was read
//     (seq > Seen) whose place is inside the range already scrolled, after
//     (At, ID) and at or before (TopAt, TopID), the first post of the
//     first page.
//
// Seen is the settle watermark of the previous page: every settled post
// with seq <= Seen was visible to it (social_feed_seq's prefix property),
// so each post at or below the top is returned exactly once, however late
// its transaction committed (FEED-03). Posts above the top are new: a
// fresh first page shows them.
type position struct {
	Strategy byte
	At       time.Time
	ID       int64
	TopAt    time.Time
	TopID    int64
	Seen     int64
}

// first is the position of a first page: everything, no late arrivals.
func first(strategy byte) position {
	return position{
		Strategy: strategy,
		At:       time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), ID: math.MaxInt64,
		TopAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), TopID: 0,
		Seen: math.MaxInt64,
	}
}

// Cursor layout: version, strategy, At (µs), ID, TopAt (µs), TopID, Seen,
// then the first macLen bytes of HMAC-SHA256 over the reader and all of
// the above. The MAC binds the cursor to its reader and strategy: another
// reader's cursor, another strategy's or an edited one fails to verify.
const (
	cursorVersion = 1
	payloadLen    = 2 + 5*8
	macLen        = 16
	cursorLen     = payloadLen + macLen
)

// cursorKeyLabel derives the cursor key from the token secret, so that
// every replica agrees on it without another secret to manage, and a token
// MAC can never be replayed as a cursor MAC (or the reverse).
const cursorKeyLabel = "fencelab/social/feed/cursor/v1"

// CursorKey derives the cursor MAC key from the token secret.
func CursorKey(tokenSecret []byte) []byte {
	m := hmac.New(sha256.New, tokenSecret)
	m.Write([]byte(cursorKeyLabel))
	return m.Sum(nil)
}

func (p position) encode(key []byte, reader string) string {
	b := make([]byte, payloadLen, cursorLen)
	b[0], b[1] = cursorVersion, p.Strategy
	binary.BigEndian.PutUint64(b[2:], uint64(p.At.UnixMicro()))
	binary.BigEndian.PutUint64(b[10:], uint64(p.ID))
	binary.BigEndian.PutUint64(b[18:], uint64(p.TopAt.UnixMicro()))
	binary.BigEndian.PutUint64(b[26:], uint64(p.TopID))
	binary.BigEndian.PutUint64(b[34:], uint64(p.Seen))
	b = append(b, cursorMAC(key, reader, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func cursorMAC(key []byte, reader string, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(reader))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:macLen]
}

// decodeCursor verifies and parses s for reader. Any failure — not
// base64, wrong length, bad MAC (tampered, another reader's, another
// deployment's), unknown version — is errInvalidCursor; which one is not
// told, so the answer teaches a forger nothing.
func decodeCursor(key []byte, reader, s string) (position, error) {
	if len(s) != base64.RawURLEncoding.EncodedLen(cursorLen) {
		return position{}, errInvalidCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen {
		return position{}, errInvalidCursor
	}
	payload, mac := b[:payloadLen], b[payloadLen:]
	if !hmac.Equal(mac, cursorMAC(key, reader, payload)) || payload[0] != cursorVersion {
		return position{}, errInvalidCursor
	}
	p := position{
		Strategy: payload[1],
		At:       time.UnixMicro(int64(binary.BigEndian.Uint64(payload[2:]))).UTC(),
		ID:       int64(binary.BigEndian.Uint64(payload[10:])),
		TopAt:    time.UnixMicro(int64(binary.BigEndian.Uint64(payload[18:]))).UTC(),
		TopID:    int64(binary.BigEndian.Uint64(payload[26:])),
		Seen:     int64(binary.BigEndian.Uint64(payload[34:])),
	}
	return p, nil
}
