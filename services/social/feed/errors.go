package feed

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInvalidCursor: not a cursor this deployment issued to this reader
	// for this strategy (tampered, foreign, or garbage).
	ErrInvalidCursor = errors.New("feed: invalid cursor")
	// ErrInvalidLimit: limit outside 1..MaxLimit.
	ErrInvalidLimit = errors.New("feed: limit must be 1..100")
	// ErrInvalidStrategy: not push, pull or hybrid.
	ErrInvalidStrategy = errors.New("feed: unknown strategy")
	// ErrStrategyUnavailable: the push strategy was asked for a reader who
	// follows an author whose posts were not pushed; the inbox alone would
	// silently miss them (FEED-I2).
	ErrStrategyUnavailable = errors.New("feed: the push strategy cannot serve this reader")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrInvalidCursor, http.StatusBadRequest, "invalid_cursor"),
	httpx.Map(ErrInvalidLimit, http.StatusBadRequest, "invalid_limit"),
	httpx.Map(ErrInvalidStrategy, http.StatusBadRequest, "invalid_strategy"),
	httpx.Map(ErrStrategyUnavailable, http.StatusConflict, "strategy_unavailable"),
}
