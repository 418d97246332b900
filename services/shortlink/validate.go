package shortlink

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
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
	minCodeLen    = 3
	maxCodeLen    = 64
	RandomCodeLen = 8
)

// MaxExpiry is how far in the future an expiry may be set.
const maxExpiry = 10 * 365 * 24 * time.Hour

// reserved are the aliases refused because they read as parts of the
// service although no route answers under them (yet): words of any web
// service, and the program's name. Compared case-insensitively: aliases
// are lower case. The words that are parts of the service — the first path
// segment of every route the process serves (/points, /console, /s) — are
// not kept here by hand: the process tells the service once its routes
// are mounted (app.Runtime.Mounted, Service.reserveRoutes), so a module
// added tomorrow is reserved without anyone remembering to.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`admin api app assets help login logout new static www fencelab system`) {
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
		return fmt.Errorf("%w: target is required", errInvalidTarget)
	}
	if len(raw) > MaxTargetLen {
		return fmt.Errorf("%w: longer than %d bytes", errInvalidTarget, MaxTargetLen)
	}
	for i := 0; i < len(raw); i++ {
		if !uriChar(raw[i]) {
			return fmt.Errorf("%w: byte %d (0x%02x) is not allowed in a URL; percent-encode it", errInvalidTarget, i, raw[i])
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: not a URL", errInvalidTarget)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https": // Parse lowercases the scheme
		return fmt.Errorf("%w: scheme must be http or https", errInvalidTarget)
	case u.Opaque != "" || !strings.HasPrefix(raw[len(u.Scheme)+1:], "//"):
		return fmt.Errorf("%w: must be absolute, like https://host/path", errInvalidTarget)
	case u.User != nil:
		return fmt.Errorf("%w: user information (user:password@) is not allowed", errInvalidTarget)
	case u.Hostname() == "":
		return fmt.Errorf("%w: host is required", errInvalidTarget)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: port must be 1..65535", errInvalidTarget)
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
// not a reserved word. Service.Create also refuses the routes' first
// segments, which only the process knows.
func ValidateAlias(alias string) error {
	if !validCode(alias) {
		return fmt.Errorf("%w: want %d to %d characters of A-Z a-z 0-9 _ -", errInvalidAlias, minCodeLen, maxCodeLen)
	}
	if reserved[strings.ToLower(alias)] {
		return fmt.Errorf("%w: %q is a reserved word", errReservedAlias, alias)
	}
	return nil
}

// validCode reports whether s can be a code at all. The redirect path
// checks it before touching the cache or the database, so garbage costs
// neither a lookup nor a cache slot. Hand-written: it runs on every
// redirect.
func validCode(s string) bool {
	if len(s) < minCodeLen || len(s) > maxCodeLen {
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
func validateExpiry(at *time.Time, now time.Time) error {
	switch {
	case at == nil:
		return nil
	case !at.After(now):
		return fmt.Errorf("%w: expires_at must be in the future", errInvalidExpiry)
	case at.Sub(now) > maxExpiry:
		return fmt.Errorf("%w: expires_at is more than %d days ahead", errInvalidExpiry, int(maxExpiry.Hours()/24))
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

// privateTarget reports why a target's host is not a public address, or ""
// when it may be one: a literal loopback, private, link-local (the cloud
// metadata service at 169.254.169.254 among them), unspecified, multicast
// or shared (100.64/10) address, or a name that always means this machine
// (localhost and *.localhost) or a metadata service. Whoever follows a
// short link — a browser, or a link checker or preview fetcher inside
// someone's network — would otherwise be sent into that network by an
// outsider's link.
//
// Names are not resolved: that would need the network at request time,
// and the answer could change after the check anyway. So a public-looking
// name that resolves to a private address is not caught here; only
// literals and the reserved names are.
//
// An IPv4 literal is read the way browsers read one (the WHATWG URL
// standard): 127.1, 0x7f.0.0.1, 017700000001 and 2130706433 are all
// 127.0.0.1. A host that looks numeric but is no address is refused too.
func privateTarget(host string) string {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	switch {
	case h == "localhost" || strings.HasSuffix(h, ".localhost") || h == "localhost.localdomain" ||
		h == "ip6-localhost" || h == "ip6-loopback":
		return "a name of this machine"
	case h == "metadata" || h == "metadata.google.internal" || h == "instance-data" ||
		strings.HasSuffix(h, ".internal"):
		return "a cloud-internal name"
	}
	addr, err := netip.ParseAddr(h)
	if err != nil {
		var ok bool
		if addr, ok, err = whatwgIPv4(h); !ok {
			return "" // a name
		}
		if err != nil {
			return "a malformed numeric address"
		}
	}
	addr = addr.Unmap()
	if addr.Is6() && nat64.Contains(addr) { // 64:ff9b::a.b.c.d reaches a.b.c.d
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	switch {
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsLinkLocalUnicast():
		return "a link-local address (the metadata service lives there)"
	case addr.IsPrivate():
		return "a private address"
	case addr.IsUnspecified() || thisNetwork.Contains(addr):
		return "an unspecified address"
	case addr.IsMulticast() || addr == broadcast:
		return "a multicast or broadcast address"
	case shared.Contains(addr):
		return "a shared (carrier-grade NAT) address"
	}
	return ""
}

var (
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	shared      = netip.MustParsePrefix("100.64.0.0/10")
	broadcast   = netip.MustParseAddr("255.255.255.255")
)

// whatwgIPv4 parses host as the WHATWG URL standard's IPv4 parser does:
// it is an IPv4 host (ok) when its last dot-separated part is a number
// (decimal, 0x hex or 0-prefixed octal); up to four parts, the last one
// filling the remaining bytes. err says such a host is no valid address.
func whatwgIPv4(host string) (addr netip.Addr, ok bool, err error) {
	parts := strings.Split(host, ".")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if _, numeric, _ := whatwgNumber(parts[len(parts)-1]); !numeric {
		return netip.Addr{}, false, nil
	}
	bad := errors.New("not an IPv4 address")
	if len(parts) > 4 {
		return netip.Addr{}, true, bad
	}
	var n []uint64
	for _, p := range parts {
		v, _, valid := whatwgNumber(p)
		if !valid {
			return netip.Addr{}, true, bad
		}
		n = append(n, v)
	}
	last := n[len(n)-1]
	if last >= 1<<(8*(5-len(n))) {
		return netip.Addr{}, true, bad
	}
	var v uint64
	for i, p := range n[:len(n)-1] {
		if p > 255 {
			return netip.Addr{}, true, bad
		}
		v |= p << (8 * (3 - i))
	}
	v += last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, nil
}

// whatwgNumber parses one IPv4 part: decimal, 0x/0X hex (possibly empty
// after the prefix) or octal with a leading 0. numeric says the part is
// written as a number at all (all digits, or 0x and hex digits); ok that
// it is a valid one (not 09, not beyond 64 bits).
func whatwgNumber(s string) (v uint64, numeric, ok bool) {
	base, digits := 10, s
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		base, digits = 16, s[2:]
	case len(s) >= 2 && s[0] == '0':
		base, digits = 8, s[1:]
	}
	if s == "" || strings.Trim(digits, "0123456789abcdefABCDEF") != "" ||
		(base != 16 && strings.Trim(digits, "0123456789") != "") {
		return 0, false, false
	}
	if digits == "" {
		return 0, true, true // "0x" is zero
	}
	v, err := strconv.ParseUint(digits, base, 64)
	return v, true, err == nil
}
