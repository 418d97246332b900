package rel

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrUserNotFound: the other user has never used the service.
	errUserNotFound = errors.New("social: no such user")
	// ErrSelf: an operation on oneself (follow yourself, block yourself).
	ErrSelf = errors.New("social: cannot do that to yourself")
	// ErrBlocked: the other user blocks you (REL-I2 refuses new requests).
	ErrBlocked = errors.New("social: this user blocks you")
	// ErrYouBlock: you block this user; unblock first (REL-I2).
	ErrYouBlock = errors.New("social: you block this user; unblock first")
	// ErrNotPending: no pending follow request from that user.
	ErrNotPending = errors.New("social: no pending request from this user")
	// ErrPostNotFound: no post with this id.
	ErrPostNotFound = errors.New("social: no such post")
	// ErrForbidden: AccessCheck refuses the read.
	ErrForbidden = errors.New("social: you may not read this")
	// ErrNotAuthor: only the author changes a post.
	errNotAuthor = errors.New("social: only the author may change this post")
	// ErrInvalidVisibility, ErrInvalidBody, ErrInvalidUser, ErrInvalidCursor,
	// ErrInvalidLimit, ErrInvalidPostID: client input out of bounds.
	errInvalidVisibility = errors.New("social: visibility must be PUBLIC, FOLLOWERS or SELF")
	errInvalidBody       = errors.New("social: body must be 1..4000 characters")
	ErrInvalidUser       = errors.New("social: invalid user id")
	errInvalidCursor     = errors.New("social: invalid cursor")
	errInvalidLimit      = errors.New("social: limit must be 1..200")
	errInvalidPostID     = errors.New("social: post id must be a positive integer")
	// ErrRaced: the pair's row moved under its lock — impossible while the
	// locking holds; reported as a retryable 503, never applied.
	errRaced = errors.New("social: relation changed under its lock; retry")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(errUserNotFound, http.StatusNotFound, "user_not_found"),
	httpx.Map(ErrSelf, http.StatusUnprocessableEntity, "self_relation"),
	httpx.Map(ErrBlocked, http.StatusForbidden, "blocked"),
	httpx.Map(ErrYouBlock, http.StatusConflict, "you_block"),
	httpx.Map(ErrNotPending, http.StatusConflict, "not_pending"),
	httpx.Map(ErrPostNotFound, http.StatusNotFound, "post_not_found"),
	httpx.Map(ErrForbidden, http.StatusForbidden, "forbidden"),
	httpx.Map(errNotAuthor, http.StatusForbidden, "not_author"),
	httpx.Map(errInvalidVisibility, http.StatusUnprocessableEntity, "invalid_visibility"),
	httpx.Map(errInvalidBody, http.StatusUnprocessableEntity, "invalid_body"),
	httpx.Map(ErrInvalidUser, http.StatusBadRequest, "invalid_id"), // the one rule for malformed ids
	httpx.Map(errInvalidCursor, http.StatusBadRequest, "invalid_cursor"),
	httpx.Map(errInvalidLimit, http.StatusBadRequest, "invalid_limit"),
	httpx.Map(errInvalidPostID, http.StatusBadRequest, "invalid_post_id"),
	httpx.Map(errRaced, http.StatusServiceUnavailable, "retry"),
}
