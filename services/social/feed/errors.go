package feed

import (
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// errInvalidCursor: not a cursor this deployment issued to this reader
	// for this strategy (tampered, foreign, or garbage).
	errInvalidCursor = Errors.New(http.StatusBadRequest, "invalid_cursor", "feed: invalid cursor")
	// errInvalidLimit: limit outside 1..MaxLimit.
	errInvalidLimit = Errors.New(http.StatusBadRequest, "invalid_limit", "feed: limit must be 1..100")
	// errInvalidStrategy: not push, pull or hybrid.
	errInvalidStrategy = Errors.New(http.StatusBadRequest, "invalid_strategy", "feed: unknown strategy")
	// errStrategyUnavailable: the push strategy was asked for a reader who
	// follows an author whose posts were not pushed; the inbox alone would
	// silently miss them (FEED-I2).
	errStrategyUnavailable = Errors.New(http.StatusConflict, "strategy_unavailable", "feed: the push strategy cannot serve this reader")
)
