package like

import (
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// ErrItemNotFound: no post with this id.
	ErrItemNotFound = Errors.New(http.StatusNotFound, "item_not_found", "social: no such item")
	// ErrInvalidItem: an item id that is not a positive integer.
	ErrInvalidItem = Errors.New(http.StatusBadRequest, "invalid_item_id", "social: item id must be a positive integer")
	// ErrForbidden: AccessCheck refuses the caller this item (liking a
	// post you may not read, or reading its count) — rel's 403.
	ErrForbidden = rel.ErrForbidden
	// ErrInvalidUser: not a valid user id (rel's 400).
	ErrInvalidUser = rel.ErrInvalidUser
)
