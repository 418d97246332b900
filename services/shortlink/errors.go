package shortlink

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInvalidTarget: the target is not an absolute http(s) URL we accept.
	ErrInvalidTarget = errors.New("shortlink: invalid target")
	// ErrPrivateTarget: the target names a loopback, private, link-local
	// or metadata address, or a name of the server's own machine
	// (FENCELAB_SHORTLINK_ALLOW_PRIVATE_TARGETS opts in).
	ErrPrivateTarget = errors.New("shortlink: target is not a public address")
	// ErrInvalidAlias: the alias breaks the charset or length rule.
	ErrInvalidAlias = errors.New("shortlink: invalid alias")
	// ErrReservedAlias: the alias is a reserved word.
	ErrReservedAlias = errors.New("shortlink: alias is reserved")
	// ErrInvalidExpiry: the expiry is not in the future, or too far in it.
	ErrInvalidExpiry = errors.New("shortlink: invalid expiry")
	// ErrAliasTaken: another link already holds the alias (SL-I1).
	ErrAliasTaken = errors.New("shortlink: alias taken")
	// ErrCodeExhausted: every random code tried was taken; retrying helps.
	ErrCodeExhausted = errors.New("shortlink: no free random code found; retry")
	// ErrNotFound: no link has this code.
	ErrNotFound = errors.New("shortlink: no such link")
	// ErrRevoked and ErrExpired: the link exists but no longer redirects.
	ErrRevoked = errors.New("shortlink: link revoked")
	ErrExpired = errors.New("shortlink: link expired")
	// ErrNotOwner: the link belongs to someone else.
	ErrNotOwner = errors.New("shortlink: not your link")
	// ErrLookupUnavailable: the link store failed or did not answer within
	// the lookup timeout, so there is no answer young enough to serve
	// (SL-I2).
	ErrLookupUnavailable = errors.New("shortlink: link store unavailable; retry")
	// ErrStatsUnavailable: the stats store did not answer in time.
	ErrStatsUnavailable = errors.New("shortlink: stats store did not answer in time")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrInvalidTarget, http.StatusUnprocessableEntity, "invalid_target"),
	httpx.Map(ErrPrivateTarget, http.StatusUnprocessableEntity, "target_not_public"),
	httpx.Map(ErrInvalidAlias, http.StatusUnprocessableEntity, "invalid_alias"),
	httpx.Map(ErrReservedAlias, http.StatusUnprocessableEntity, "alias_reserved"),
	httpx.Map(ErrInvalidExpiry, http.StatusUnprocessableEntity, "invalid_expiry"),
	httpx.Map(ErrAliasTaken, http.StatusConflict, "alias_taken"),
	httpx.Map(ErrCodeExhausted, http.StatusServiceUnavailable, "code_exhausted"),
	httpx.Map(ErrNotFound, http.StatusNotFound, "link_not_found"),
	httpx.Map(ErrRevoked, http.StatusGone, "link_revoked"),
	httpx.Map(ErrExpired, http.StatusGone, "link_expired"),
	httpx.Map(ErrNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(ErrLookupUnavailable, http.StatusServiceUnavailable, "lookup_unavailable"),
	httpx.Map(ErrStatsUnavailable, http.StatusServiceUnavailable, "stats_unavailable"),
}
