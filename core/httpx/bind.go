package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// Bind decodes a JSON request body strictly into v: one JSON object,
// no unknown fields, no trailing data, types as declared. Every failure is
// the client's and gets a 4xx problem, never a 500.
func Bind(c echo.Context, v any) error {
	req := c.Request()
	if ct := req.Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return NewProblem(http.StatusUnsupportedMediaType, "unsupported_media_type", "send application/json")
		}
	}
	dec := json.NewDecoder(req.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return he
		}
		return BadRequest("malformed_json", "request body must hold exactly one JSON object")
	}
	return nil
}

func decodeProblem(err error) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		he  *echo.HTTPError
	)
	switch {
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
		return BadRequest("invalid_field", "field %q must be %s", field, typ.Type.String()).With("field", field)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return BadRequest("unknown_field", "unknown field %q", name).With("field", name)
	}
	return BadRequest("malformed_json", "%s", fmt.Sprint(err))
}
