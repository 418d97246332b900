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

func init() {
	httpx.MapError(ErrInvalidCursor, http.StatusBadRequest, "invalid_cursor")
	httpx.MapError(ErrInvalidLimit, http.StatusBadRequest, "invalid_limit")
	httpx.MapError(ErrInvalidStrategy, http.StatusBadRequest, "invalid_strategy")
	httpx.MapError(ErrStrategyUnavailable, http.StatusConflict, "strategy_unavailable")
}
