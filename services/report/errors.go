package report

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInvalidDate: the date is not YYYY-MM-DD.
	ErrInvalidDate = errors.New("report: invalid date")
	// ErrNoReport: nothing has been written for that day yet.
	ErrNoReport = errors.New("report: no report for that day")
	// ErrAlreadyWritten: a run found the day's report already written and
	// did nothing.
	ErrAlreadyWritten = errors.New("report: already written")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrInvalidDate, http.StatusBadRequest, "invalid_date"),
	httpx.Map(ErrNoReport, http.StatusNotFound, "report_not_found"),
}
