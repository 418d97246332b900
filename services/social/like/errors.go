package like

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/services/social/rel"
)

var (
	// ErrItemNotFound: no post with this id.
	ErrItemNotFound = errors.New("social: no such item")
	// ErrInvalidItem: an item id that is not a positive integer.
	ErrInvalidItem = errors.New("social: item id must be a positive integer")
	// ErrForbidden: AccessCheck refuses the caller this item (liking a
	// post you may not read, or reading its count) — rel's 403.
	ErrForbidden = rel.ErrForbidden
	// ErrInvalidUser: not a valid user id (rel's 400).
	ErrInvalidUser = rel.ErrInvalidUser
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrItemNotFound, http.StatusNotFound, "item_not_found"),
	httpx.Map(ErrInvalidItem, http.StatusBadRequest, "invalid_item_id"),
}
