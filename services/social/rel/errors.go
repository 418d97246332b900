package rel

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrUserNotFound: the other user has never used the service.
	ErrUserNotFound = errors.New("social: no such user")
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
	ErrNotAuthor = errors.New("social: only the author may change this post")
	// ErrInvalidVisibility, ErrInvalidBody, ErrInvalidUser, ErrInvalidCursor,
	// ErrInvalidLimit, ErrInvalidPostID: client input out of bounds.
	ErrInvalidVisibility = errors.New("social: visibility must be PUBLIC, FOLLOWERS or SELF")
	ErrInvalidBody       = errors.New("social: body must be 1..4000 characters")
	ErrInvalidUser       = errors.New("social: invalid user id")
	ErrInvalidCursor     = errors.New("social: invalid cursor")
	ErrInvalidLimit      = errors.New("social: limit must be 1..200")
	ErrInvalidPostID     = errors.New("social: post id must be a positive integer")
	// ErrRaced: the pair's row moved under its lock — impossible while the
	// locking holds; reported as a retryable 503, never applied.
	ErrRaced = errors.New("social: relation changed under its lock; retry")
)

func init() {
	httpx.MapError(ErrUserNotFound, http.StatusNotFound, "user_not_found")
	httpx.MapError(ErrSelf, http.StatusUnprocessableEntity, "self_relation")
	httpx.MapError(ErrBlocked, http.StatusForbidden, "blocked")
	httpx.MapError(ErrYouBlock, http.StatusConflict, "you_block")
	httpx.MapError(ErrNotPending, http.StatusConflict, "not_pending")
	httpx.MapError(ErrPostNotFound, http.StatusNotFound, "post_not_found")
	httpx.MapError(ErrForbidden, http.StatusForbidden, "forbidden")
	httpx.MapError(ErrNotAuthor, http.StatusForbidden, "not_author")
	httpx.MapError(ErrInvalidVisibility, http.StatusUnprocessableEntity, "invalid_visibility")
	httpx.MapError(ErrInvalidBody, http.StatusUnprocessableEntity, "invalid_body")
	httpx.MapError(ErrInvalidUser, http.StatusBadRequest, "invalid_id") // the one rule for malformed ids
	httpx.MapError(ErrInvalidCursor, http.StatusBadRequest, "invalid_cursor")
	httpx.MapError(ErrInvalidLimit, http.StatusBadRequest, "invalid_limit")
	httpx.MapError(ErrInvalidPostID, http.StatusBadRequest, "invalid_post_id")
	httpx.MapError(ErrRaced, http.StatusServiceUnavailable, "retry")
}
