package report

import (
	"errors"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/pg"
)

func isNoRows(err error) bool { return errors.Is(err, pg.ErrNotFound) }

// Invariants are the package's SQL invariants; its module lists them in
// app.Module.Invariants.
var Invariants = []invariant.Invariant{
	{
		ID:      "LOCK-I2",
		Module:  "report",
		Chapter: lease.Chapter,
		Statement: "every report_output row was written under the highest fence that had written it: " +
			"no write carries a fence lower than an earlier write's, each write's fence was granted to its " +
			"writer, and each row matches its latest write",
		// Write order is id order: writes of one day serialise on the
		// fence guard's row lock, and draw their ids while holding it.
		// Rows of data only: whether a write went through lease.Guard is
		// how it was made, not what it left; a naive writer without the
		// guard is caught by what it wrote (a lower fence after a higher
		// one), and a lone unguarded write that broke nothing holds.
		SQL: `
SELECT report_date, id AS write_id, fence, holder, 'written after a higher fence had written' AS problem
  FROM (SELECT report_date, id, fence, holder,
               max(fence) OVER (PARTITION BY report_date ORDER BY id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS highest_before
          FROM report_write) w
 WHERE fence < highest_before
UNION ALL
SELECT w.report_date, w.id, w.fence, w.holder, 'fence was never granted to this writer'
  FROM report_write w
 WHERE NOT EXISTS (SELECT 1 FROM lease_grant g
                    WHERE g.name = 'report:' || to_char(w.report_date, 'YYYY-MM-DD')
                      AND g.fence = w.fence
                      AND g.holder = w.holder)
UNION ALL
SELECT o.report_date, last.id, o.written_fence, o.written_by, 'row does not match its latest write'
  FROM report_output o
  LEFT JOIN LATERAL (SELECT id, fence, holder FROM report_write w
                      WHERE w.report_date = o.report_date
                      ORDER BY id DESC LIMIT 1) last ON true
 WHERE last.fence IS DISTINCT FROM o.written_fence
    OR last.holder IS DISTINCT FROM o.written_by`,
	},
}
