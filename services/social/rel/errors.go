package rel

import (
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// errUserNotFound: the other user has never used the service.
	errUserNotFound = Errors.New(http.StatusNotFound, "user_not_found", "social: no such user")
	// ErrSelf: an operation on oneself (follow yourself, block yourself).
	ErrSelf = Errors.New(http.StatusUnprocessableEntity, "self_relation", "social: cannot do that to yourself")
	// ErrBlocked: the other user blocks you (REL-I2 refuses new requests).
	ErrBlocked = Errors.New(http.StatusForbidden, "blocked", "social: this user blocks you")
	// ErrYouBlock: you block this user; unblock first (REL-I2).
	ErrYouBlock = Errors.New(http.StatusConflict, "you_block", "social: you block this user; unblock first")
	// ErrNotPending: no pending follow request from that user.
	ErrNotPending = Errors.New(http.StatusConflict, "not_pending", "social: no pending request from this user")
	// ErrPostNotFound: no post with this id.
	ErrPostNotFound = Errors.New(http.StatusNotFound, "post_not_found", "social: no such post")
	// ErrForbidden: AccessCheck refuses the read.
	ErrForbidden = Errors.New(http.StatusForbidden, "forbidden", "social: you may not read this")
	// errNotAuthor: only the author changes a post.
	errNotAuthor = Errors.New(http.StatusForbidden, "not_author", "social: only the author may change this post")
	// errInvalidVisibility, errInvalidBody, ErrInvalidUser, errInvalidCursor,
	// errInvalidLimit, errInvalidPostID: client input out of bounds.
	errInvalidVisibility = Errors.New(http.StatusUnprocessableEntity, "invalid_visibility", "social: visibility must be PUBLIC, FOLLOWERS or SELF")
	errInvalidBody       = Errors.New(http.StatusUnprocessableEntity, "invalid_body", "social: body must be 1..4000 characters")
	ErrInvalidUser       = Errors.New(http.StatusBadRequest, "invalid_id", "social: invalid user id")
	errInvalidCursor     = Errors.New(http.StatusBadRequest, "invalid_cursor", "social: invalid cursor")
	errInvalidLimit      = Errors.New(http.StatusBadRequest, "invalid_limit", "social: limit must be 1..200")
	errInvalidPostID     = Errors.New(http.StatusBadRequest, "invalid_post_id", "social: post id must be a positive integer")
	// errRaced: the pair's row moved under its lock — impossible while the
	// locking holds; reported as a retryable 503, never applied.
	errRaced = Errors.New(http.StatusServiceUnavailable, "retry", "social: relation changed under its lock; retry")
)
