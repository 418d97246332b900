package httpx

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Bind decodes a JSON request body strictly into v (see DecodeJSON): one
// JSON object, no unknown, duplicate or case-variant keys, no trailing
// data, types as declared, text the database can store. Every failure is
// the client's and gets a 4xx problem, never a 500.
func Bind(c echo.Context, v any) error {
	req := c.Request()
	if ct := req.Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return NewProblem(http.StatusUnsupportedMediaType, "unsupported_media_type", "send application/json")
		}
	}
	body, err := ReadBody(req)
	if err != nil {
		return err
	}
	return DecodeJSON(body, v)
}

// ReadBody reads the whole request body under the body limit and the body
// deadline: 413 when it is too large, 408 when it trickles in too slowly.
func ReadBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, ReadProblem(err)
	}
	return b, nil
}

// ReadProblem classifies an error reading a request body: 413 past the
// body limit, 408 body_timeout past the body deadline, 400 otherwise.
func ReadProblem(err error) error {
	var he *echo.HTTPError
	var ne net.Error
	switch {
	case errors.As(err, &he):
		return he // body limit: 413
	case errors.Is(err, errBodyTimeout) || errors.Is(err, http.ErrBodyReadAfterClose) ||
		(errors.As(err, &ne) && ne.Timeout()):
		return NewProblem(http.StatusRequestTimeout, "body_timeout", "the request body did not arrive in time")
	}
	return BadRequest("malformed_body", "the request body could not be read")
}

func decodeProblem(err error) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		he  *echo.HTTPError
		ke  *keyError
		te  *time.ParseError
	)
	switch {
	case errors.As(err, &ke):
		return ke.p
	case errors.As(err, &he):
		return he // body limit: 413
	case errors.Is(err, io.EOF):
		return BadRequest("empty_body", "request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return BadRequest("malformed_json", "request body ends in the middle of a JSON value")
	case errors.As(err, &syn):
		return BadRequest("malformed_json", "malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return BadRequest("malformed_json", "request body must be a JSON object")
		}
		return BadRequest("invalid_field", "field %q must be %s", field, kindWords(typ.Type)).With("field", field)
	case errors.As(err, &te):
		return BadRequest("invalid_field", "a time must be written in RFC 3339, like 2026-12-01T09:30:00Z")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return BadRequest("unknown_field", "unknown field %q", name).With("field", name)
	}
	// Anything else (a custom type's own parser): never echo its message.
	return BadRequest("malformed_json", "request body does not match the expected shape")
}

// kindWords names a Go type the way an API client thinks of JSON values.
func kindWords(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// NoBody is route middleware for a route that takes no request body: a
// body is refused (400 body_not_allowed), not silently ignored — a client
// that sends one believes it means something.
func NoBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Body != nil && r.Body != http.NoBody && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
			var one [1]byte
			n, err := io.ReadFull(r.Body, one[:])
			if n > 0 {
				return BadRequest("body_not_allowed", "this route takes no request body")
			}
			if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				return ReadProblem(err)
			}
		}
		return next(c)
	}
}

// EmptyBody refuses a body on a user route that acts on its path alone
// (follow, like): none, or an empty JSON object, passes; anything else is
// refused by Bind's rules (a "user_id" naming someone else is an
// unknown_field), never ignored — the caller's identity comes from the
// token, not from a body. Admin routes use NoBody, which refuses any byte.
func EmptyBody(c echo.Context) error {
	r := c.Request()
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var none struct{}
	return Bind(c, &none)
}
