package shortlink

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuTimes is CPU time spent by this process (server and load generator)
// and by the PostgreSQL cluster (postmaster and its children).
type cpuTimes struct{ self, pg time.Duration }

func (c cpuTimes) minus(o cpuTimes) cpuTimes { return cpuTimes{c.self - o.self, c.pg - o.pg} }

// cpuMeter reads cpuTimes. A run's CPU per request is steadier than its
// rate on a machine shared with other work, and it shows which side —
// this process or the database — a route's extra cost lands on.
type cpuMeter struct {
	postmaster int // 0: not on this machine (or unreadable); pg is then 0
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTick = 10 * time.Millisecond

// newCPUMeter finds the cluster's postmaster from its postmaster.pid (a
// superuser may read it); when the cluster is elsewhere only this
// process is measured.
func newCPUMeter(ctx context.Context, pool *pgxpool.Pool) cpuMeter {
	var dir string
	if err := pool.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dir); err != nil {
		return cpuMeter{}
	}
	var pidFile string
	if err := pool.QueryRow(ctx, `SELECT pg_read_file('postmaster.pid')`).Scan(&pidFile); err != nil {
		return cpuMeter{}
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(pidFile, "\n", 2)[0]))
	if err != nil {
		return cpuMeter{}
	}
	// Only when that process is here and serves that directory.
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
		return cpuMeter{}
	}
	return cpuMeter{postmaster: pid}
}

func (m cpuMeter) read() cpuTimes {
	var ru syscall.Rusage
	var c cpuTimes
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if m.postmaster == 0 {
		return c
	}
	// The postmaster's own time and its reaped children's (backends that
	// exited), then every live child's.
	if f, ok := procStat(m.postmaster); ok {
		c.pg += clockTick * time.Duration(f[11]+f[12]+f[13]+f[14])
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, ok := procStat(pid); ok && int(f[1]) == m.postmaster {
			c.pg += clockTick * time.Duration(f[11]+f[12])
		}
	}
	return c
}

// procStat returns the numeric fields of /proc/<pid>/stat after the
// command name: f[0] is the state's slot (0), f[1] ppid, f[11] utime,
// f[12] stime, f[13] cutime, f[14] cstime.
func procStat(pid int) ([]int64, bool) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil, false
	}
	fields := strings.Fields(string(raw[i+1:]))
	if len(fields) < 15 {
		return nil, false
	}
	out := make([]int64, 15)
	for k := 1; k < 15; k++ {
		out[k], _ = strconv.ParseInt(fields[k], 10, 64)
	}
	return out, true
}
