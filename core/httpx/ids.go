package httpx

import (
	"strconv"

	"github.com/labstack/echo/v4"
)

// The one rule for malformed path ids, in every module: an id that cannot
// name anything (not a positive integer, not a UUID, not a valid user id)
// is 400 invalid_id with "field" naming the path parameter and a plain
// message; a well-formed id that names nothing (or nothing of yours) is
// 404 not_found. No parser message ever reaches the client.

// InvalidID is the 400 for a malformed path id; want says what an id
// looks like ("a positive integer").
func InvalidID(param, want string) *Problem {
	return BadRequest("invalid_id", "%s must be %s", param, want).With("field", param)
}

// ParseID parses a positive decimal int64: digits only (no sign, no
// spaces), at most 19 of them, greater than zero.
func ParseID(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// ParamID reads the positive integer path parameter name, or answers
// InvalidID.
func ParamID(c echo.Context, name string) (int64, error) {
	id, ok := ParseID(c.Param(name))
	if !ok {
		return 0, InvalidID(name, "a positive integer")
	}
	return id, nil
}
