package notify

import (
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// errUnknownUser: no preferences are stored for the user, so the
	// service does not know them.
	errUnknownUser = Errors.New(http.StatusNotFound, "unknown_user", "notify: unknown user")
	// errNotificationNotFound / errTaskNotFound: no such id.
	errNotificationNotFound = Errors.New(http.StatusNotFound, "notification_not_found", "notify: no such notification")
	errTaskNotFound         = Errors.New(http.StatusNotFound, "task_not_found", "notify: no such task")
	// errNotYours: a user asked for another user's notification or
	// preferences, or a service for a notification another service
	// submitted.
	errNotYours = Errors.New(http.StatusForbidden, "forbidden", "notify: not yours")
	// ErrNotInReview: the task is not waiting for a person (someone decided
	// first, or it never needed one).
	ErrNotInReview = Errors.New(http.StatusConflict, "not_in_review", "notify: task is not in review")
)
