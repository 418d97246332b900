package feed

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInvalidCursor: not a cursor this deployment issued to this reader
	// for this strategy (tampered, foreign, or garbage).
	errInvalidCursor = errors.New("feed: invalid cursor")
	// ErrInvalidLimit: limit outside 1..MaxLimit.
	errInvalidLimit = errors.New("feed: limit must be 1..100")
	// ErrInvalidStrategy: not push, pull or hybrid.
	errInvalidStrategy = errors.New("feed: unknown strategy")
	// ErrStrategyUnavailable: the push strategy was asked for a reader who
	// follows an author whose posts were not pushed; the inbox alone would
	// silently miss them (FEED-I2).
	errStrategyUnavailable = errors.New("feed: the push strategy cannot serve this reader")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(errInvalidCursor, http.StatusBadRequest, "invalid_cursor"),
	httpx.Map(errInvalidLimit, http.StatusBadRequest, "invalid_limit"),
	httpx.Map(errInvalidStrategy, http.StatusBadRequest, "invalid_strategy"),
	httpx.Map(errStrategyUnavailable, http.StatusConflict, "strategy_unavailable"),
}
