package outbox

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// ConsumerStatus is one consumer as GET /outbox/consumers and the lag
// metrics show it.
type ConsumerStatus struct {
	Name       string     `json:"name"`
	Topics     []string   `json:"topics"`
	Position   Position   `json:"-"`
	PositionTx string     `json:"position_tx"` // xid8 as text: it may exceed 2^53
	PositionID int64      `json:"position_id"`
	Processed  int64      `json:"processed"`
	Owner      *string    `json:"owner"`
	Fence      int64      `json:"fence"`
	LeaseUntil *time.Time `json:"lease_until"`
	UpdatedAt  time.Time  `json:"updated_at"`
	// LagEvents counts the events on the consumer's topics after its
	// position, including those whose transactions are still open; it
	// saturates at LagCountCap per topic.
	LagEvents int64 `json:"lag_events"`
	// LagSeconds is the age, on the database clock, of the first of them
	// in read order (0 when caught up).
	LagSeconds float64 `json:"lag_seconds"`
}

// Statuses reads every consumer and its lag.
func Statuses(ctx context.Context, db pg.Querier) ([]ConsumerStatus, error) {
	rows, err := db.Query(ctx, sqlStatus)
	if err != nil {
		return nil, fmt.Errorf("outbox: status: %w", err)
	}
	defer rows.Close()
	var out []ConsumerStatus
	for rows.Next() {
		var s ConsumerStatus
		if err := rows.Scan(&s.Name, &s.Topics, &s.Position.TxID, &s.Position.ID, &s.Processed, &s.Owner,
			&s.Fence, &s.LeaseUntil, &s.UpdatedAt, &s.LagEvents, &s.LagSeconds); err != nil {
			return nil, fmt.Errorf("outbox: status: %w", err)
		}
		s.PositionTx, s.PositionID = fmt.Sprint(s.Position.TxID), s.Position.ID
		out = append(out, s)
	}
	return out, rows.Err()
}

// WriteStatus prints the consumers as a table (for `fencelab check`).
func WriteStatus(ctx context.Context, db pg.Querier, w io.Writer) error {
	ss, err := Statuses(ctx, db)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tTOPICS\tPOSITION\tPROCESSED\tLAG EVENTS\tLAG\tOWNER\tFENCE")
	for _, s := range ss {
		owner := "-"
		if s.Owner != nil {
			owner = *s.Owner
		}
		fmt.Fprintf(tw, "%s\t%s\t(%s,%d)\t%d\t%d\t%.1fs\t%s\t%d\n", s.Name, strings.Join(s.Topics, ","),
			s.PositionTx, s.PositionID, s.Processed, s.LagEvents, s.LagSeconds, owner, s.Fence)
	}
	return tw.Flush()
}
