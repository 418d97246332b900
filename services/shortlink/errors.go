package shortlink

import (
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// errInvalidTarget: the target is not an absolute http(s) URL we accept.
	errInvalidTarget = Errors.New(http.StatusUnprocessableEntity, "invalid_target", "shortlink: invalid target")
	// errPrivateTarget: the target names a loopback, private, link-local
	// or metadata address, or a name of the server's own machine
	// (FENCELAB_SHORTLINK_ALLOW_PRIVATE_TARGETS opts in).
	errPrivateTarget = Errors.New(http.StatusUnprocessableEntity, "target_not_public", "shortlink: target is not a public address")
	// errInvalidAlias: the alias breaks the charset or length rule.
	errInvalidAlias = Errors.New(http.StatusUnprocessableEntity, "invalid_alias", "shortlink: invalid alias")
	// errReservedAlias: the alias is a reserved word.
	errReservedAlias = Errors.New(http.StatusUnprocessableEntity, "alias_reserved", "shortlink: alias is reserved")
	// errInvalidExpiry: the expiry is not in the future, or too far in it.
	errInvalidExpiry = Errors.New(http.StatusUnprocessableEntity, "invalid_expiry", "shortlink: invalid expiry")
	// errAliasTaken: another link already holds the alias (SL-I1).
	errAliasTaken = Errors.New(http.StatusConflict, "alias_taken", "shortlink: alias taken")
	// errCodeExhausted: every random code tried was taken; retrying helps.
	errCodeExhausted = Errors.New(http.StatusServiceUnavailable, "code_exhausted", "shortlink: no free random code found; retry")
	// ErrNotFound: no link has this code.
	ErrNotFound = Errors.New(http.StatusNotFound, "link_not_found", "shortlink: no such link")
	// errRevoked and errExpired: the link exists but no longer redirects.
	errRevoked = Errors.New(http.StatusGone, "link_revoked", "shortlink: link revoked")
	errExpired = Errors.New(http.StatusGone, "link_expired", "shortlink: link expired")
	// errNotOwner: the link belongs to someone else.
	errNotOwner = Errors.New(http.StatusForbidden, "forbidden", "shortlink: not your link")
	// errLookupUnavailable: the link store failed or did not answer within
	// the lookup timeout, so there is no answer young enough to serve
	// (SL-I2).
	errLookupUnavailable = Errors.New(http.StatusServiceUnavailable, "lookup_unavailable", "shortlink: link store unavailable; retry")
	// errStatsUnavailable: the stats store did not answer in time.
	errStatsUnavailable = Errors.New(http.StatusServiceUnavailable, "stats_unavailable", "shortlink: stats store did not answer in time")
)
