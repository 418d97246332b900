package report

import (
	"fmt"
	"time"
)

// DateLayout is how report dates are written everywhere: URLs, lease
// names, logs.
const DateLayout = "2006-01-02"

// Report is one day's output as stored: what was written, under which
// fence and by whom.
type Report struct {
	Date      time.Time // a calendar day (midnight UTC)
	Content   string
	Fence     int64  // the fence of the lease grant that wrote it
	WrittenBy string // the holder of that grant
	WrittenAt time.Time
}

// View is a report as GET /reports/{date} returns it.
type View struct {
	Date      string    `json:"date"`
	Content   string    `json:"content"`
	Fence     int64     `json:"fence"`
	WrittenBy string    `json:"written_by"`
	WrittenAt time.Time `json:"written_at"`
}

func (r Report) View() View {
	return View{Date: r.Date.Format(DateLayout), Content: r.Content, Fence: r.Fence, WrittenBy: r.WrittenBy, WrittenAt: r.WrittenAt}
}

// ParseDate accepts exactly YYYY-MM-DD naming a real day from year 1 on.
func ParseDate(s string) (time.Time, error) {
	d, err := time.Parse(DateLayout, s)
	if err != nil || d.Year() < 1 {
		return time.Time{}, fmt.Errorf("%w: %q is not a YYYY-MM-DD date", errInvalidDate, truncate(s))
	}
	return d, nil
}

// LeaseName is the lease that gives one instance the right to produce the
// report for day.
func LeaseName(day time.Time) string { return leasePrefix + day.Format(DateLayout) }

// leasePrefix starts the name of every report lease (report.purge takes
// only these).
const leasePrefix = "report:"

// resource is the fence-guarded resource a day's report is written to.
func resource(day time.Time) string { return "report_output:" + day.Format(DateLayout) }

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Purged is what one Purge removed (report.purge's job result): whole
// report days, with their lease grants and report writes.
type Purged struct {
	Days   int64 `json:"days"`
	Grants int64 `json:"grants"`
	Writes int64 `json:"writes"`
}
