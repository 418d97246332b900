package notify

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrUnknownUser: no preferences are stored for the user, so the
	// service does not know them.
	errUnknownUser = errors.New("notify: unknown user")
	// ErrNotificationNotFound / ErrTaskNotFound: no such id.
	errNotificationNotFound = errors.New("notify: no such notification")
	errTaskNotFound         = errors.New("notify: no such task")
	// ErrNotYours: a user asked for another user's notification or
	// preferences, or a service for a notification another service
	// submitted.
	errNotYours = errors.New("notify: not yours")
	// ErrNotInReview: the task is not waiting for a person (someone decided
	// first, or it never needed one).
	ErrNotInReview = errors.New("notify: task is not in review")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(errUnknownUser, http.StatusNotFound, "unknown_user"),
	httpx.Map(errNotificationNotFound, http.StatusNotFound, "notification_not_found"),
	httpx.Map(errTaskNotFound, http.StatusNotFound, "task_not_found"),
	httpx.Map(errNotYours, http.StatusForbidden, "forbidden"),
	httpx.Map(ErrNotInReview, http.StatusConflict, "not_in_review"),
}
