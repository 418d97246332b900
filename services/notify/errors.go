package notify

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrUnknownUser: no preferences are stored for the user, so the
	// service does not know them.
	ErrUnknownUser = errors.New("notify: unknown user")
	// ErrNotificationNotFound / ErrTaskNotFound: no such id.
	ErrNotificationNotFound = errors.New("notify: no such notification")
	ErrTaskNotFound         = errors.New("notify: no such task")
	// ErrNotYours: a user asked for another user's notification or
	// preferences, or a service for a notification another service
	// submitted.
	ErrNotYours = errors.New("notify: not yours")
	// ErrNotInReview: the task is not waiting for a person (someone decided
	// first, or it never needed one).
	ErrNotInReview = errors.New("notify: task is not in review")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrUnknownUser, http.StatusNotFound, "unknown_user"),
	httpx.Map(ErrNotificationNotFound, http.StatusNotFound, "notification_not_found"),
	httpx.Map(ErrTaskNotFound, http.StatusNotFound, "task_not_found"),
	httpx.Map(ErrNotYours, http.StatusForbidden, "forbidden"),
	httpx.Map(ErrNotInReview, http.StatusConflict, "not_in_review"),
}
