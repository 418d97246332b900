package idem

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/url"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

// Header is the request header of the IETF draft.
const Header = "Idempotency-Key"

// ReplayedHeader marks a response that was replayed from the record.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyLen bounds a key (Stripe's limit); keys end up in a primary key.
const MaxKeyLen = 255

// keyRE is the accepted alphabet: what UUIDs, ULIDs and base64url tokens
// use, plus a few separators. No spaces, quotes or control characters.
var keyRE = regexp.MustCompile(`^[A-Za-z0-9._:~+/=-]+$`)

// parseKey validates the header. The draft defines the value as a
// Structured Field string ("…" with quotes); clients such as Stripe's send
// it bare. Both are accepted and mean the same key.
func parseKey(raw string) (string, *httpx.Problem) {
	k := strings.TrimSpace(raw)
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	switch {
	case k == "":
		return "", httpx.BadRequest("idempotency_key_invalid", "%s is empty", Header)
	case len(k) > MaxKeyLen:
		return "", httpx.BadRequest("idempotency_key_invalid", "%s is longer than %d characters", Header, MaxKeyLen)
	case !keyRE.MatchString(k):
		return "", httpx.BadRequest("idempotency_key_invalid",
			"%s may contain only letters, digits and . _ : ~ + / = -", Header)
	}
	return k, nil
}

// fingerprint is SHA-256 over the method, the request's concrete path and
// query, and the canonical body. The concrete path (not the route
// template) is what makes one key sent to two accounts two different
// requests: the second one is a 422, not a replay of the first.
func fingerprint(method string, u *url.URL, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(u.EscapedPath()))
	h.Write([]byte{0})
	h.Write([]byte(u.Query().Encode())) // sorted by key: order-insensitive
	h.Write([]byte{0})
	h.Write(canonicalBody(body))
	return h.Sum(nil)
}

// canonicalBody makes equivalent JSON documents byte-equal: whitespace and
// object member order do not change the fingerprint (the form is
// json.Marshal's of the decoded document: keys sorted); numbers keep their
// literal text. It is written in one pass, without building the document
// (canonical.go), so a keyed write's fingerprint costs about its body's
// size whatever the body's shape. A body that is not JSON is fingerprinted
// as sent, and so is one nested deeper than httpx.MaxJSONDepth: the
// handler's decoder refuses it (400 body_too_deep).
func canonicalBody(b []byte) []byte {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil
	}
	if httpx.TooDeep(trimmed) {
		return b
	}
	out, ok := canonicalJSON(trimmed)
	if !ok {
		return b
	}
	return out
}

// readBody reads the request body (the body-limit middleware has wrapped
// it, so an oversized body ends in its 413) and puts it back for Bind.
func readBody(c echo.Context) ([]byte, error) {
	req := c.Request()
	if req.Body == nil {
		return nil, nil
	}
	b, err := httpx.ReadBody(req)
	if err != nil {
		return nil, err
	}
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}
