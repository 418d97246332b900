package load

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// CPU is CPU time consumed so far: by this process (server and load
// generator, when both run in it) and by the PostgreSQL server's
// processes, when that server runs on this machine (PGOK). On a shared
// machine throughput follows the load of others; CPU time per operation
// does much less, which makes it the figure to compare changes by.
type CPU struct {
	Process, PG time.Duration
	PGOK        bool
}

// SampleCPU reads this process's CPU time and, through /proc, that of
// every PostgreSQL process pg_stat_activity lists (backends and background
// workers) — possible only when the server is local. Backends must live
// across the interval measured (a pool's connections do).
func SampleCPU(ctx context.Context, db pg.Querier) CPU {
	var c CPU
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return c
	}
	defer rows.Close()
	c.PGOK = true
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			c.PGOK = false
			continue
		}
		t, ok := procCPU(pid)
		if !ok {
			c.PGOK = false
			continue
		}
		c.PG += t
	}
	if rows.Err() != nil {
		c.PGOK = false
	}
	return c
}

// Sub is the CPU time spent between o and c.
func (c CPU) Sub(o CPU) CPU {
	return CPU{Process: c.Process - o.Process, PG: c.PG - o.PG, PGOK: c.PGOK && o.PGOK}
}

// procCPU is a local process's user + system time from /proc/PID/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || !strings.Contains(s[:i], "(postgres") {
		return 0, false // not a PostgreSQL process: the server is elsewhere
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); utime is field 14, stime 15
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(ut+st) * tick, true
}
