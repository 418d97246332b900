package report

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// errInvalidDate: the date is not YYYY-MM-DD.
	errInvalidDate = Errors.New(http.StatusBadRequest, "invalid_date", "report: invalid date")
	// ErrNoReport: nothing has been written for that day yet.
	ErrNoReport = Errors.New(http.StatusNotFound, "report_not_found", "report: no report for that day")
	// ErrAlreadyWritten: a run found the day's report already written and
	// did nothing.
	ErrAlreadyWritten = errors.New("report: already written")
)
