package shortlink

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInvalidTarget: the target is not an absolute http(s) URL we accept.
	errInvalidTarget = errors.New("shortlink: invalid target")
	// ErrPrivateTarget: the target names a loopback, private, link-local
	// or metadata address, or a name of the server's own machine
	// (FENCELAB_SHORTLINK_ALLOW_PRIVATE_TARGETS opts in).
	errPrivateTarget = errors.New("shortlink: target is not a public address")
	// ErrInvalidAlias: the alias breaks the charset or length rule.
	errInvalidAlias = errors.New("shortlink: invalid alias")
	// ErrReservedAlias: the alias is a reserved word.
	errReservedAlias = errors.New("shortlink: alias is reserved")
	// ErrInvalidExpiry: the expiry is not in the future, or too far in it.
	errInvalidExpiry = errors.New("shortlink: invalid expiry")
	// ErrAliasTaken: another link already holds the alias (SL-I1).
	errAliasTaken = errors.New("shortlink: alias taken")
	// ErrCodeExhausted: every random code tried was taken; retrying helps.
	errCodeExhausted = errors.New("shortlink: no free random code found; retry")
	// ErrNotFound: no link has this code.
	ErrNotFound = errors.New("shortlink: no such link")
	// ErrRevoked and ErrExpired: the link exists but no longer redirects.
	errRevoked = errors.New("shortlink: link revoked")
	errExpired = errors.New("shortlink: link expired")
	// ErrNotOwner: the link belongs to someone else.
	errNotOwner = errors.New("shortlink: not your link")
	// ErrLookupUnavailable: the link store failed or did not answer within
	// the lookup timeout, so there is no answer young enough to serve
	// (SL-I2).
	errLookupUnavailable = errors.New("shortlink: link store unavailable; retry")
	// ErrStatsUnavailable: the stats store did not answer in time.
	errStatsUnavailable = errors.New("shortlink: stats store did not answer in time")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(errInvalidTarget, http.StatusUnprocessableEntity, "invalid_target"),
	httpx.Map(errPrivateTarget, http.StatusUnprocessableEntity, "target_not_public"),
	httpx.Map(errInvalidAlias, http.StatusUnprocessableEntity, "invalid_alias"),
	httpx.Map(errReservedAlias, http.StatusUnprocessableEntity, "alias_reserved"),
	httpx.Map(errInvalidExpiry, http.StatusUnprocessableEntity, "invalid_expiry"),
	httpx.Map(errAliasTaken, http.StatusConflict, "alias_taken"),
	httpx.Map(errCodeExhausted, http.StatusServiceUnavailable, "code_exhausted"),
	httpx.Map(ErrNotFound, http.StatusNotFound, "link_not_found"),
	httpx.Map(errRevoked, http.StatusGone, "link_revoked"),
	httpx.Map(errExpired, http.StatusGone, "link_expired"),
	httpx.Map(errNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(errLookupUnavailable, http.StatusServiceUnavailable, "lookup_unavailable"),
	httpx.Map(errStatsUnavailable, http.StatusServiceUnavailable, "stats_unavailable"),
}
