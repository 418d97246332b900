package shortlink

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxTargetLen caps a target URL, in bytes.
const MaxTargetLen = 2048

// Code and alias lengths. Random codes are RandomCodeLen base62 characters
// (62^8 ≈ 2·10^14 codes, so a collision is rare and retried); aliases use
// the wider charset [A-Za-z0-9_-].
const (
	MinCodeLen    = 3
	MaxCodeLen    = 64
	RandomCodeLen = 8
)

// MaxExpiry is how far in the future an expiry may be set.
const MaxExpiry = 10 * 365 * 24 * time.Hour

// reserved is the one list of aliases refused because they read as parts
// of the service: every module's name and top-level path, the operational
// endpoints and a few words of any web service (compared
// case-insensitively: aliases are lower case).
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		admin api app assets healthz help links login logout metrics new readyz static www
		shortlink s points flashsale orders reservations social feed likes relations rel
		notify notifications upload uploads workflow workflows report reports jobs outbox
		idem lease claim failover fencelab system`) {
		m[w] = true
	}
	return m
}()

// ValidateTarget accepts an absolute http or https URL of at most
// MaxTargetLen bytes made only of the characters RFC 3986 allows. That
// refuses other schemes (javascript:, data:, file:), relative and
// scheme-relative references, control characters, whitespace and raw
// non-ASCII (clients percent-encode; hosts use punycode) — so the Location
// header we send is exactly the URL the owner saw. Userinfo is refused:
// "https://bank.example.test@evil.example.test/" is a phishing shape.
func ValidateTarget(raw string) error {
	if raw == "" {
		return fmt.Errorf("%w: target is required", ErrInvalidTarget)
	}
	if len(raw) > MaxTargetLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidTarget, MaxTargetLen)
	}
	for i := 0; i < len(raw); i++ {
		if !uriChar(raw[i]) {
			return fmt.Errorf("%w: byte %d (0x%02x) is not allowed in a URL; percent-encode it", ErrInvalidTarget, i, raw[i])
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: not a URL", ErrInvalidTarget)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https": // Parse lowercases the scheme
		return fmt.Errorf("%w: scheme must be http or https", ErrInvalidTarget)
	case u.Opaque != "" || !strings.HasPrefix(raw[len(u.Scheme)+1:], "//"):
		return fmt.Errorf("%w: must be absolute, like https://host/path", ErrInvalidTarget)
	case u.User != nil:
		return fmt.Errorf("%w: user information (user:password@) is not allowed", ErrInvalidTarget)
	case u.Hostname() == "":
		return fmt.Errorf("%w: host is required", ErrInvalidTarget)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: port must be 1..65535", ErrInvalidTarget)
		}
	}
	return nil
}

// uriChar reports whether b may appear in a URI (RFC 3986: unreserved,
// reserved and '%').
func uriChar(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("-._~:/?#[]@!$&'()*+,;=%", b) >= 0
}

// ValidateAlias applies the alias rule: 3–64 characters of [A-Za-z0-9_-],
// not a reserved word.
func ValidateAlias(alias string) error {
	if !validCode(alias) {
		return fmt.Errorf("%w: want %d to %d characters of A-Z a-z 0-9 _ -", ErrInvalidAlias, MinCodeLen, MaxCodeLen)
	}
	if reserved[strings.ToLower(alias)] {
		return fmt.Errorf("%w: %q is a reserved word", ErrReservedAlias, alias)
	}
	return nil
}

// validCode reports whether s can be a code at all. The redirect path
// checks it before touching the cache or the database, so garbage costs
// neither a lookup nor a cache slot. Hand-written: it runs on every
// redirect.
func validCode(s string) bool {
	if len(s) < MinCodeLen || len(s) > MaxCodeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// ValidateExpiry accepts nil (never) or a time after now and at most
// MaxExpiry ahead.
func ValidateExpiry(at *time.Time, now time.Time) error {
	switch {
	case at == nil:
		return nil
	case !at.After(now):
		return fmt.Errorf("%w: expires_at must be in the future", ErrInvalidExpiry)
	case at.Sub(now) > MaxExpiry:
		return fmt.Errorf("%w: expires_at is more than %d days ahead", ErrInvalidExpiry, int(MaxExpiry.Hours()/24))
	}
	return nil
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomCode returns RandomCodeLen uniformly random base62 characters
// (bytes ≥ 248 are rejected so that no character is favoured).
func randomCode() string {
	var out [RandomCodeLen]byte
	var buf [2 * RandomCodeLen]byte
	for n := 0; n < len(out); {
		_, _ = rand.Read(buf[:]) // never fails (crypto/rand, Go ≥ 1.24)
		for _, b := range buf {
			if b < 248 && n < len(out) {
				out[n] = base62[b%62]
				n++
			}
		}
	}
	return string(out[:])
}
