package claim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// DefaultRetention is how long finished jobs (succeeded, failed,
// cancelled) and their history are kept for inspection before claim.purge
// deletes them (FENCELAB_CLAIM_RETENTION). A day of job_history is dropped
// whole once its last instant is older than the retention: a job is kept
// at least the retention and at most a day longer.
const DefaultRetention = 72 * time.Hour

// HistoryDaysAhead is how many days past today claim.purge (and the
// migration that made job_history) keep created, so a finish lands in its
// day's partition, never the default one, unless the engine stopped for
// that long.
const HistoryDaysAhead = 7

// PurgeBatch bounds one purge statement: its row locks, its transaction
// and the rows it examines.
const PurgeBatch = 1000

// PurgeKindName is the periodic kind that enforces the retention.
const PurgeKindName = "claim.purge"

// PurgeFinished deletes up to batch jobs of job_history's default
// partition that finished more than olderThan ago by the database clock,
// with their job_event rows in the same statement, skipping kinds
// registered with KeepFinished. It returns how many jobs it deleted. The
// day partitions are dropped whole by PurgeDays instead.
func (c *Client) PurgeFinished(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, sqlPurgeFinished, olderThan.Microseconds(), batch, c.kept()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("claim: purge finished jobs: %w", pg.MapError(err))
	}
	return n, nil
}

// RetentionKind is a retention purge (docs/DATA.md) as a periodic kind:
// one run per slot across all processes, every retention/24 and at least
// every 10 minutes, so a purge's backlog stays a small share of what the
// retention keeps. What purge returns is recorded as the job's result.
// Every module's retention is one of these.
func RetentionKind(name string, retention time.Duration, purge func(context.Context) (any, error)) Kind {
	return Kind{Name: name, Every: min(retention/24, 10*time.Minute),
		Handle: func(ctx context.Context, j *Job) error {
			res, err := purge(ctx)
			if err != nil {
				return err
			}
			return j.SetResult(res)
		}}
}

// Deleted is the result most purges record: how many rows went.
func Deleted[N int | int64](n N) map[string]int64 { return map[string]int64{"deleted": int64(n)} }

// HistoryStats is what one claim.purge run did.
type HistoryStats struct {
	Swept       int      `json:"swept"`        // finished rows moved out of job (hand-written updates)
	DaysCreated []string `json:"days_created"` // day partitions created ahead
	DaysDropped []string `json:"days_dropped"` // expired day partitions dropped
	DroppedJobs int64    `json:"dropped_jobs"` // jobs those days held (kept kinds moved out first)
	Deleted     int      `json:"deleted"`      // expired jobs deleted from the default partition
}

// PurgeKind is claim.purge: finished rows left in job are swept to the
// history, the days ahead are created, expired days are dropped, and the
// default partition's expired jobs are deleted in batches of PurgeBatch
// until a batch comes back short.
func (c *Client) PurgeKind(retention time.Duration) Kind {
	return RetentionKind(PurgeKindName, retention, func(ctx context.Context) (any, error) {
		return c.MaintainHistory(ctx, retention)
	})
}

// MaintainHistory is one claim.purge run (see PurgeKind).
func (c *Client) MaintainHistory(ctx context.Context, retention time.Duration) (HistoryStats, error) {
	var st HistoryStats
	for {
		var n int
		if err := c.pool.QueryRow(ctx, sqlSweepLive, PurgeBatch).Scan(&n); err != nil {
			return st, fmt.Errorf("claim: sweep finished jobs to history: %w", pg.MapError(err))
		}
		st.Swept += n
		if n < PurgeBatch {
			break
		}
	}
	created, err := c.EnsureHistoryDays(ctx, 0, HistoryDaysAhead)
	st.DaysCreated = created
	if err != nil {
		return st, err
	}
	st.DaysDropped, st.DroppedJobs, err = c.PurgeDays(ctx, retention)
	if err != nil {
		return st, err
	}
	for {
		n, err := c.PurgeFinished(ctx, retention, PurgeBatch)
		st.Deleted += n
		if err != nil || n < PurgeBatch {
			return st, err
		}
	}
}

// today is the database's UTC date.
func (c *Client) today(ctx context.Context) (time.Time, error) {
	var s string
	if err := c.pool.QueryRow(ctx, sqlToday).Scan(&s); err != nil {
		return time.Time{}, fmt.Errorf("claim: today: %w", pg.MapError(err))
	}
	return time.Parse(time.DateOnly, s)
}

func dayName(d time.Time) string { return historyDayPrefix + d.Format("20060102") }

// EnsureHistoryDays creates the day partitions of job_history from today
// plus from to today plus to (days, UTC, inclusive) that do not exist yet,
// and returns their names. A day the default partition already holds rows
// for cannot be created (PostgreSQL refuses the overlap): it is skipped,
// and its rows stay in the default partition, purged by PurgeFinished.
// DDL waits at most two seconds for its lock, so that a long reader never
// queues completions behind it; a day that times out is tried next run.
func (c *Client) EnsureHistoryDays(ctx context.Context, from, to int) ([]string, error) {
	today, err := c.today(ctx)
	if err != nil {
		return nil, err
	}
	have, err := historyDays(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	var created []string
	for i := from; i <= to; i++ {
		d := today.AddDate(0, 0, i)
		name := dayName(d)
		if _, ok := have[name]; ok {
			continue
		}
		err := pg.InTx(ctx, c.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf(sqlCreateDay, name, d.Format(time.DateOnly), d.AddDate(0, 0, 1).Format(time.DateOnly)))
			return err
		})
		if err != nil {
			c.log.Warn("claim: cannot create a history day (its finishes stay in the default partition)", "day", name, "err", err)
			continue
		}
		created = append(created, name)
	}
	return created, nil
}

func historyDays(ctx context.Context, db pg.Querier) (map[string]time.Time, error) {
	rows, err := db.Query(ctx, sqlHistoryDays)
	if err != nil {
		return nil, fmt.Errorf("claim: list history days: %w", pg.MapError(err))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("claim: list history days: %w", pg.MapError(err))
	}
	out := make(map[string]time.Time, len(names))
	for _, n := range names {
		d, err := time.Parse("20060102", strings.TrimPrefix(n, historyDayPrefix))
		if err != nil {
			continue // not one of ours
		}
		out[n] = d
	}
	return out, nil
}

// historyDay is one day partition of job_history: its name and the
// instants it holds, [from, to).
type historyDay struct {
	name     string
	from, to time.Time
}

// expiredDays are the day partitions whose last instant is older than
// retention by the database clock, oldest first: what PurgeDays drops.
func expiredDays(ctx context.Context, db pg.Querier, retention time.Duration) ([]historyDay, error) {
	days, err := historyDays(ctx, db)
	if err != nil {
		return nil, err
	}
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, fmt.Errorf("claim: purge days: %w", pg.MapError(err))
	}
	cutoff := now.Add(-retention)
	var out []historyDay
	for _, name := range slices.Sorted(maps.Keys(days)) {
		d := historyDay{name: name, from: days[name], to: days[name].AddDate(0, 0, 1)}
		if !d.to.After(cutoff) {
			out = append(out, d)
		}
	}
	return out, nil
}

// PurgeDays drops every day partition whose last instant is older than
// retention by the database clock, each in its own transaction: the day's
// jobs of KeepFinished kinds move to job_history_kept, the day's jobs'
// events are deleted, and the partition is dropped. The cost is the day's
// rows and a catalog change, never the rest of the history (DayProbes
// lets the plan tests hold it to that). It returns the days dropped and
// how many jobs they held.
func (c *Client) PurgeDays(ctx context.Context, retention time.Duration) ([]string, int64, error) {
	days, err := expiredDays(ctx, c.pool, retention)
	if err != nil {
		return nil, 0, err
	}
	kept := c.kept()
	var dropped []string
	var jobs int64
	for _, d := range days {
		var n int64
		err := pg.InTx(ctx, c.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlKeepDay, kept, d.from, d.to); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, fmt.Sprintf(sqlDayCount, d.name)).Scan(&n); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(sqlDayRows, d.name)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf(sqlDropDay, d.name))
			return err
		})
		if err != nil {
			return dropped, jobs, fmt.Errorf("claim: drop history day %s: %w", d.name, pg.MapError(err))
		}
		dropped = append(dropped, d.name)
		jobs += n
	}
	return dropped, jobs, nil
}

// DayProbes are, for each day with jobs that PurgeDays would drop now,
// the part of its drop that reads rows — sqlDayRows, deleting the day's
// events and keys by job id — as a probe bounded by the day's own jobs
// (the drop itself is a catalog change), for the plan tests and
// `fencelab bench growth` (docs/DATA.md). A first version of that
// statement joined on the key and hashed the whole key table; a probe
// fails on such a plan. Measured before sqlKeepDay has moved the day's
// kept jobs out, it examines those too: still the day's rows.
func DayProbes(ctx context.Context, db pg.Querier, retention time.Duration) ([]pg.Probe, error) {
	days, err := expiredDays(ctx, db, retention)
	if err != nil {
		return nil, err
	}
	var ps []pg.Probe
	for _, d := range days {
		var n int
		if err := db.QueryRow(ctx, fmt.Sprintf(sqlDayCount, d.name)).Scan(&n); err != nil {
			return nil, fmt.Errorf("claim: count history day %s: %w", d.name, pg.MapError(err))
		}
		if n == 0 {
			continue // an empty day's drop reads no rows: nothing to hold
		}
		ps = append(ps, pg.Probe{Name: "claim.purge: an expired day's events and keys", When: pg.Periodic,
			SQL: fmt.Sprintf(sqlDayRows, d.name), Bound: pg.Batch(n)})
	}
	return ps, nil
}

// GrowthProbes are the claim engine's periodic and per-scrape queries, for
// the plan tests and `fencelab bench growth`: each must examine rows in
// proportion to its batch or the live queue, never to the history.
func GrowthProbes(retention time.Duration, kept []string) []pg.Probe {
	if kept == nil {
		kept = []string{}
	}
	return []pg.Probe{
		{Name: "claim.purge batch", When: pg.Periodic, SQL: sqlPurgeFinished,
			Args: []any{retention.Microseconds(), PurgeBatch, kept}, Bound: pg.Batch(PurgeBatch)},
		{Name: "claim queue depth (scrape, console)", When: pg.PerScrape, SQL: sqlDepth, Bound: pg.Live},
		{Name: "claim oldest ready", When: pg.PerScrape, SQL: sqlOldestReady, Bound: pg.Live},
		{Name: "console jobs in review (page)", When: pg.PerRequest, SQL: sqlListWaiting,
			Args: []any{string(StateNeedsReview), int64(0), MaxListed}, Bound: pg.Batch(MaxListed)},
		{Name: "claim take unknown", When: pg.Periodic, SQL: sqlTakeUnknown,
			Args: []any{100, "probe", int64(30_000_000)}, Bound: pg.Live},
		{Name: "claim recover expired", When: pg.Periodic, SQL: sqlRecoverExpired,
			Args: []any{100, []string{}, int64(0), "probe"}, Bound: pg.Live},
	}
}
