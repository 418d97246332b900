package claim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/workflow"
)

// Experiments are the claim chapter's runnable claims (fencelab lab run …).
var Experiments = []lab.Experiment{
	TwoProcesses, TwoClaimers, ExpiredOwner, UnknownToReview, RetriesBackOff,
	RecoverExpired, PoolDrains, LostHeartbeat,
}

// claimLab is one claim experiment's world: a fresh database and a fake
// tool whose ledger is the ground truth of effects.
type claimLab struct {
	url  string
	pool *pgxpool.Pool
	tool *fakeprovider.Server
}

// bookTool is the chapter's tool: accepts idempotency keys, answers queries.
var bookTool = fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true, Query: true}

func newClaimLab(x *lab.X, caps fakeprovider.Capabilities) claimLab {
	x.Helper()
	url := x.Database()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(x, err)
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(x, err)
	x.Cleanup(pool.Close)
	tool, err := fakeprovider.Start(caps)
	require.NoError(x, err)
	x.Cleanup(tool.Close)
	return claimLab{url: url, pool: pool, tool: tool}
}

// worker is a claim client under one owner name, running the workflow kind
// against the lab's tool (or the given kinds).
func (l claimLab) worker(x *lab.X, owner string, kinds ...claim.Kind) *claim.Client {
	x.Helper()
	c := claim.NewClient(l.pool, claim.Options{Owner: owner})
	if len(kinds) == 0 {
		kinds = []claim.Kind{workflow.NewKind(l.tool.Client())}
	}
	require.NoError(x, c.Register(kinds...))
	return c
}

func (l claimLab) enqueue(x *lab.X, c *claim.Client, nj claim.NewJob) int64 {
	x.Helper()
	id, created, err := c.Enqueue(context.Background(), l.pool, nj)
	require.NoError(x, err)
	require.True(x, created)
	return id
}

// claimOne is w's claim round that must take exactly one job (of kinds, or
// of any kind w runs).
func claimOne(x *lab.X, w *claim.Client, kinds ...string) *claim.Job {
	x.Helper()
	jobs, err := w.Claim(context.Background(), claim.ClaimParams{Kinds: kinds})
	require.NoError(x, err)
	require.Len(x, jobs, 1)
	return jobs[0]
}

type jobRow struct {
	State    claim.State
	Owner    string
	Fence    int64
	Attempts int
	LastErr  string
}

func (l claimLab) job(x *lab.X, id int64) jobRow {
	x.Helper()
	var r jobRow
	require.NoError(x, l.pool.QueryRow(context.Background(),
		`SELECT state, coalesce(owner, ''), fence, attempts, coalesce(last_error, '') FROM job_all WHERE id = $1`, id).
		Scan(&r.State, &r.Owner, &r.Fence, &r.Attempts, &r.LastErr))
	return r
}

// history is a job's events as "event:fence".
func (l claimLab) history(x *lab.X, id int64) []string {
	x.Helper()
	return lab.JobHistory(x, l.pool, id)
}

func (l claimLab) count(x *lab.X, sql string, args ...any) int {
	x.Helper()
	var n int
	require.NoError(x, l.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// TwoProcesses is the chapter's central figure: two separate `fencelab
// worker` processes, one start gate, one workflow. The winner pauses right
// after its claim committed, the loser finds nothing and exits; the
// database names the paused process as owner; the winner is released,
// calls the tool and commits. The figure line is computed from the event
// table, the tool's ledger and the job row.
var TwoProcesses = lab.Experiment{
	ID:         "claim/two-processes",
	Test:       "TestTwoWorkerProcessesClaimExactlyOne",
	Claim:      "two worker processes released at once on one workflow: one claim, one tool effect, the job succeeds",
	Invariants: []string{"claim"},
	Overlap:    true,
	Run:        runTwoProcesses,
}

func runTwoProcesses(x *lab.X) {
	l := newClaimLab(x, bookTool)
	ctx := context.Background()
	const key = "wf-0001"
	id := l.enqueue(x, claim.NewClient(l.pool, claim.Options{}), claim.NewJob{Kind: workflow.KindName, BusinessKey: key})
	var enqueued time.Time
	require.NoError(x, l.pool.QueryRow(ctx, `SELECT created_at FROM job_all WHERE id = $1`, id).Scan(&enqueued))
	x.Step(lab.Step{Actor: "client", Action: fmt.Sprintf("enqueue workflow %s (job %d)", key, id), Outcome: lab.Accepted, DBTime: enqueued})

	// Only the workflow kind: other modules' periodic jobs are not part of
	// this experiment.
	args := []string{"worker", "--start-gate", "--pause-at", "after_claim", "--exit-when-idle", "--kinds", workflow.KindName}
	var workers []*lab.Proc
	for _, name := range []string{"process-A", "process-B"} {
		env := x.Env.ChildEnv(l.url, workflow.EnvToolURL+"="+l.tool.URL(), "FENCELAB_WORKERS=2")
		workers = append(workers, x.Spawn(name, env, args...))
	}
	ready := map[int]bool{} // distinct OS processes at the gate
	for _, w := range workers {
		w.Expect(x, "READY")
		ready[w.Pid()] = true
		x.Step(lab.Step{Actor: w.Name, Action: fmt.Sprintf("pid %d: at the start gate", w.Pid()), Outcome: "ready"})
	}

	// The overlap is forced, not hoped for (CLAIM-I3 is about two claims
	// in flight at once): the lab holds a SHARE lock on job, which every
	// claim's UPDATE waits for, so both claim statements are in flight —
	// each has taken its snapshot and sees the job ready — before either
	// can lock the row. pg_stat_activity shows both waiting; then the lab
	// lets go and SKIP LOCKED decides.
	gate, err := l.pool.Begin(ctx)
	require.NoError(x, err)
	defer func() { _ = gate.Rollback(ctx) }()
	var locked time.Time
	_, err = gate.Exec(ctx, `LOCK TABLE job IN SHARE MODE`)
	require.NoError(x, err)
	require.NoError(x, gate.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&locked))
	x.Step(lab.Step{Actor: "admin", Action: "hold a SHARE lock on job: every claim statement waits at it", DBTime: locked})
	for _, w := range workers { // open the gate for both
		w.Release(x)
	}
	x.Say("admin", "open both gates at once")
	// Which OS process a backend serves: its client port is one of that
	// process's sockets (both processes are "fencelab-worker" to
	// pg_stat_activity).
	inFlight := map[string]time.Time{} // process → its claim statement's query_start
	until := time.Now().Add(30 * time.Second)
	for len(inFlight) < 2 && time.Now().Before(until) {
		rows, err := l.pool.Query(ctx, `
			SELECT client_port, query_start FROM pg_stat_activity
			 WHERE datname = current_database() AND state = 'active' AND wait_event_type = 'Lock'
			   AND query LIKE '%state = ''running'', owner =%'`)
		require.NoError(x, err)
		type backend struct {
			port    int
			started time.Time
		}
		var waiting []backend
		for rows.Next() {
			var b backend
			require.NoError(x, rows.Scan(&b.port, &b.started))
			waiting = append(waiting, b)
		}
		require.NoError(x, rows.Err())
		for _, w := range workers {
			ports := socketPorts(w.Pid())
			for _, b := range waiting {
				if _, seen := inFlight[w.Name]; !seen && ports[b.port] {
					inFlight[w.Name] = b.started
				}
			}
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a boundary: the boundary is the lock
	}
	if len(inFlight) < 2 { // say what the processes were doing instead
		rows, err := l.pool.Query(ctx, `
			SELECT application_name || ' ' || state || ' ' || coalesce(wait_event_type, '') || ': ' || left(regexp_replace(query, '\s+', ' ', 'g'), 120)
			  FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		require.NoError(x, err)
		seen, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(x, err)
		x.Logf("pg_stat_activity when the wait ended:\n%s", strings.Join(seen, "\n"))
	}
	var released time.Time
	require.NoError(x, gate.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&released))
	var ivs []lab.Interval
	for _, w := range workers {
		started, ok := inFlight[w.Name]
		if !ok {
			continue
		}
		x.Step(lab.Step{Actor: w.Name, Action: "claim statement in flight: snapshot taken, waiting at the lock", Outcome: "waiting", DBTime: started, DBEnd: released})
		ivs = append(ivs, lab.Interval{Actor: w.Name, From: started, To: released})
	}
	require.NoError(x, gate.Commit(ctx))
	x.Step(lab.Step{Actor: "admin", Action: "release the lock: both claims proceed", DBTime: released})
	if !x.Overlap("both processes' claim statements in flight at once", ivs...) {
		x.FailNow()
	}

	// Exactly one pauses after its claim; the other's claim is empty and it
	// exits. A closed stdout is the loser exiting (possibly before the
	// winner prints); a nil channel drops out of the select.
	var winner, loser *lab.Proc
	want := fmt.Sprintf("PAUSED after_claim %d", id)
	deadline := time.After(lab.ProcWait)
	out0, out1 := workers[0].Lines, workers[1].Lines
	for winner == nil {
		select {
		case line, ok := <-out0:
			if !ok {
				out0 = nil
				continue
			}
			require.Equal(x, want, line)
			winner, loser = workers[0], workers[1]
		case line, ok := <-out1:
			if !ok {
				out1 = nil
				continue
			}
			require.Equal(x, want, line)
			winner, loser = workers[1], workers[0]
		case <-deadline:
			x.Fatalf("no worker paused after its claim; stderr:\n%s\n%s", workers[0].Stderr(), workers[1].Stderr())
		}
	}
	row := l.job(x, id)
	var claimedAt time.Time
	require.NoError(x, l.pool.QueryRow(ctx, `SELECT at FROM job_event WHERE job_id = $1 AND event = 'claimed'`, id).Scan(&claimedAt))
	x.Step(lab.Step{Actor: winner.Name, Action: fmt.Sprintf("claim job %d (SKIP LOCKED), commit, pause before the tool call", id), Outcome: lab.Accepted, Fence: row.Fence, DBTime: claimedAt,
		Note: "db time: the claim's transaction start (the event's now())"})
	require.NoError(x, loser.Wait(x), "the loser exits cleanly after its empty claim")
	x.Step(lab.Step{Actor: loser.Name, Action: "claim: no ready job (the row is claimed), exit when idle", Outcome: "empty"})

	require.Equal(x, claim.StateRunning, row.State)
	require.Contains(x, row.Owner, "/"+strconv.Itoa(winner.Pid())+"/", "the database names the paused process as owner")
	require.Zero(x, l.tool.Posts(), "the winner paused before calling the tool")
	x.Step(lab.Step{Actor: "db", Action: "job " + strconv.FormatInt(id, 10) + " is running, owner " + row.Owner, Fence: row.Fence, DBTime: x.DBNow(l.pool)})

	winner.Release(x)
	require.NoError(x, winner.Wait(x))
	effects := l.tool.EffectsFor(workflow.IdempotencyKey(key))
	require.Equal(x, len(effects), l.tool.Posts(), "every POST made an effect: no retry hid a second call")
	var state string
	var doneAt time.Time
	require.NoError(x, l.pool.QueryRow(ctx, `SELECT state, updated_at FROM job_all WHERE id = $1`, id).Scan(&state, &doneAt))
	x.Step(lab.Step{Actor: winner.Name, Action: "call the tool with key " + workflow.IdempotencyKey(key) + ", complete", Outcome: state, Fence: row.Fence, DBTime: doneAt})
	claims := l.count(x, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'claimed'`, id)
	x.Figure("os_processes", len(ready))
	x.Figure("claims", claims)
	x.Figure("effects", len(effects))
	x.Figure("state", state)
	require.Equal(x, 2, len(ready))
	require.Equal(x, 1, claims)
	require.Len(x, effects, 1)
	require.Equal(x, string(claim.StateSucceeded), state)
}

// socketPorts is the local TCP ports of process pid's sockets (Linux:
// its fds' socket inodes looked up in /proc/net/tcp{,6}); empty when
// they cannot be read.
func socketPorts(pid int) map[int]bool {
	inodes := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(dir)
	for _, fd := range fds {
		link, err := os.Readlink(dir + "/" + fd.Name())
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(table)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			_, hex, _ := strings.Cut(f[1], ":")
			if port, err := strconv.ParseInt(hex, 16, 32); err == nil {
				ports[int(port)] = true
			}
		}
	}
	return ports
}

// TwoClaimers races two claimers for one ready workflow, many times over:
// each time exactly one claim event, one owner, one tool effect.
//
// The naive version is the claim the chapter argues against: read the
// ready job, then mark it running with the fence read plus one — no SKIP
// LOCKED, no re-check of the state in the UPDATE, on a schema without the
// one-claim-per-fence index. Both claimers read before either writes, so
// both own the job under the same fence and both run it: CLAIM-I3 reports
// two claims of one fence (and CLAIM-I4 two completions).
var TwoClaimers = lab.Experiment{
	ID:   "claim/two-claimers",
	Test: "TestTwoClaimersCannotOwnOneWorkflow",
	// The claim says what every run shows. The two claim calls of a round
	// are released together but are not forced to overlap (on a loaded
	// machine one can finish before the other starts), so it does not say
	// "racing": claim/two-processes is the forced, checked overlap.
	Claim:      "two claimers released together for one ready workflow, 50 times: each time one claim, one owner, one tool effect",
	Invariants: []string{"claim"},
	Naive:      "read the ready job, then UPDATE it to running with the fence read + 1 — no SKIP LOCKED, no state re-check, no unique claim per fence",
	Catches:    []string{"CLAIM-I3", "CLAIM-I4"},
	Control:    "the same read-then-write claim by one claimer: nothing interleaves, one claim, one completion",
	Run:        runTwoClaimers,
	Explore:    twoClaimersExplore,
}

func runTwoClaimers(x *lab.X) {
	l := newClaimLab(x, bookTool)
	ctx := context.Background()
	a, b := l.worker(x, "claimer-a"), l.worker(x, "claimer-b")
	if x.Naive {
		naiveClaimers(x, l, a)
		return
	}
	const rounds = 50
	owners := map[string]int{}
	// The race is checked, not assumed: some round's two claim calls
	// must overlap in database time (CLAIM-I3 is about claims in flight
	// at once); 50 serial rounds would prove nothing.
	var overlapped []lab.Interval
	overlapsSeen := false
	for i := range rounds {
		key := fmt.Sprintf("wf-%04d", i)
		id := l.enqueue(x, a, claim.NewJob{Kind: workflow.KindName, BusinessKey: key})
		got := make([][]*claim.Job, 2)
		errs := make([]error, 2)
		ivs := make([]lab.Interval, 2) // each claim call bracketed by the database's clock
		claimers := []*claim.Client{a, b}
		lab.AtOnce(len(claimers), func(n int) {
			c := claimers[n]
			ivs[n] = lab.Interval{Actor: c.Owner(), From: x.DBNow(l.pool)}
			got[n], errs[n] = c.Claim(ctx, claim.ClaimParams{Kinds: []string{workflow.KindName}, Limit: 1})
			ivs[n].To = x.DBNow(l.pool)
		})
		if overlapped == nil || ivs[0].From.Before(ivs[1].To) && ivs[1].From.Before(ivs[0].To) && !overlapsSeen {
			overlapped = ivs
			overlapsSeen = ivs[0].From.Before(ivs[1].To) && ivs[1].From.Before(ivs[0].To)
		}
		require.NoError(x, errors.Join(errs...))
		require.Equal(x, 1, len(got[0])+len(got[1]), "round %d: exactly one claimer owns the job", i)
		winner, c := got[0], a
		if len(winner) == 0 {
			winner, c = got[1], b
		}
		require.Equal(x, c.Owner(), l.job(x, id).Owner)
		require.NoError(x, c.Execute(ctx, winner[0]))
		owners[c.Owner()]++
		if i < 3 || i == rounds-1 { // the first rounds and the last tell the story
			x.Step(lab.Step{Actor: c.Owner(), Action: fmt.Sprintf("round %d: claim job %d, call the tool, complete", i+1, id), Outcome: lab.Accepted, Fence: winner[0].Fence})
			x.Step(lab.Step{Actor: other(c.Owner()), Action: fmt.Sprintf("round %d: claim", i+1), Outcome: "empty",
				Note: loserNote(ivs[0], ivs[1], c == a), DBTime: ivs[1-winnerIndex(c == a)].From, DBEnd: ivs[1-winnerIndex(c == a)].To})
		}
		require.Equal(x, 1, l.count(x, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'claimed'`, id))
		require.Len(x, l.tool.EffectsFor(workflow.IdempotencyKey(key)), 1)
	}
	// Recorded when seen, not required: the rounds are released together
	// but not forced to overlap (claim/two-processes is the forced check).
	if overlapsSeen {
		x.Overlap("two claim calls of one round in flight at once", overlapped...)
	} else {
		x.Step(lab.Step{Actor: "db", Action: "no round's two claim calls overlapped in database time", Outcome: "observed"})
	}
	succeeded := l.count(x, `SELECT count(*) FROM job_all WHERE state = 'succeeded'`)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d jobs succeeded; claimer-a won %d rounds, claimer-b %d", succeeded, owners["claimer-a"], owners["claimer-b"])})
	x.Figure("rounds", rounds)
	x.Figure("claims", l.count(x, `SELECT count(*) FROM job_event WHERE event = 'claimed'`))
	x.Figure("effects", len(l.tool.Effects()))
	require.Equal(x, rounds, succeeded)
	require.Equal(x, rounds, l.tool.Posts())
	require.Len(x, l.tool.Effects(), rounds)
}

// winnerIndex is the index in a round's intervals of the winner's claim.
func winnerIndex(aWon bool) int {
	if aWon {
		return 0
	}
	return 1
}

// loserNote says why the loser's claim found nothing, from what the
// database's clock shows of the two claim calls: only that. A claim that
// began after the winner's had returned found the job running; one in
// flight with the winner's found the row locked by it or already claimed —
// SKIP LOCKED passes the first, the state check the second, and the
// database does not tell which happened.
func loserNote(a, b lab.Interval, aWon bool) string {
	winner, loser := a, b
	if !aWon {
		winner, loser = b, a
	}
	if !loser.From.Before(winner.To) {
		return "began after the winner's claim returned: the job was running, nothing ready"
	}
	return "in flight with the winner's claim: the row was locked by it or already claimed, not claimable either way"
}

func other(owner string) string {
	if owner == "claimer-a" {
		return "claimer-b"
	}
	return "claimer-a"
}

// naiveClaimSQL is the naive claimer's write ($1 job, $2 owner, $3 the
// fence it read plus one): the job is made running as the owner's with no
// re-check of its state and no SKIP LOCKED, so two claimers that read the
// same ready row both write it theirs (CLAIM-I3 catches the two claims of
// one fence). The timeline (naiveClaimers) and the explored schedules
// (naiveClaimRun) run this one statement.
const naiveClaimSQL = `
	WITH claimed AS (
	    UPDATE job SET state = 'running', owner = $2, fence = $3, attempts = attempts + 1,
	                   lease_until = now() + interval '1 minute', updated_at = now()
	     WHERE id = $1
	    RETURNING id, fence, owner, state)
	INSERT INTO job_event (job_id, event, fence, owner, state)
	SELECT id, 'claimed', fence, owner, state FROM claimed`

// naiveCompleteSQL is the naive claimer's completion ($1 job, $2 owner):
// not conditional on the fence it claimed under, so both naive owners
// complete (CLAIM-I4).
const naiveCompleteSQL = `
	WITH done AS (
	    UPDATE job SET state = 'succeeded', lease_until = NULL, updated_at = now()
	     WHERE id = $1
	    RETURNING id, fence, state)
	INSERT INTO job_event (job_id, event, fence, owner, state)
	SELECT id, 'succeeded', fence, $2, state FROM done`

// naiveClaimers is the read-then-write claim, done by the experiment on its
// scratch database (the product's claim is one UPDATE … FOR UPDATE SKIP
// LOCKED that re-checks the state): both claimers read the ready job before
// either writes, both write it as theirs under the same fence, both call
// the tool and both complete.
func naiveClaimers(x *lab.X, l claimLab, enq *claim.Client) {
	ctx := context.Background()
	_, err := l.pool.Exec(ctx, `DROP INDEX job_event_one_claim_per_fence`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: the unique index on claimed events (job, fence) dropped"})
	const key = "wf-0000"
	id := l.enqueue(x, enq, claim.NewJob{Kind: workflow.KindName, BusinessKey: key})
	tool := l.tool.Client()
	var read sync.WaitGroup // both have read before either writes
	claimers := []string{"claimer-a", "claimer-b"}
	if x.Control {
		claimers = claimers[:1] // one claimer: nothing races it
	}
	read.Add(len(claimers))
	lab.AtOnce(len(claimers), func(i int) {
		owner := claimers[i]
		var fence int64
		err := l.pool.QueryRow(ctx, `SELECT fence FROM job_all WHERE id = $1 AND state = 'ready'`, id).Scan(&fence)
		read.Done()
		read.Wait()
		if err != nil {
			x.Error(owner, "read the ready job", err)
			return
		}
		fence++
		_, err = l.pool.Exec(ctx, naiveClaimSQL, id, owner, fence)
		if err != nil {
			x.Error(owner, "claim", err)
			return
		}
		x.Step(lab.Step{Actor: owner, Action: fmt.Sprintf("read job %d ready at fence %d, write it running as mine", id, fence-1), Outcome: lab.Accepted, Fence: fence})
		_, err = tool.Create(ctx, fakeprovider.CreateRequest{Key: workflow.IdempotencyKey(key), Reference: key})
		if err != nil {
			x.Error(owner, "call the tool", err)
			return
		}
		_, err = l.pool.Exec(ctx, naiveCompleteSQL, id, owner)
		if err != nil {
			x.Error(owner, "complete the job", err)
			return
		}
		x.Step(lab.Step{Actor: owner, Action: "call the tool, complete the job", Outcome: lab.Accepted, Fence: fence})
	})
	claims := l.count(x, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'claimed'`, id)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d claims, %d completions of job %d; the tool was called %d times",
		claims, l.count(x, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'succeeded'`, id), id, l.tool.Posts())})
	x.Figure("claims", claims)
	x.Figure("tool_calls", l.tool.Posts())
}

// ExpiredOwner is the chapter's stale-owner timeline: the owner stalls
// after its claim; its lease is expired with SQL (an exact boundary, not a
// wait); recovery raises the fence and, the tool having side effects,
// makes the job unknown; the resolver asks the tool by the idempotency
// key, gets an authoritative empty answer and sends the job back to ready;
// a new owner claims it, calls the tool and commits. Then the stalled
// owner wakes, calls the tool (same key: the same effect) and tries to
// commit its result: refused.
//
// The naive version completes the old owner's result without the fence
// check (the UPDATE matches the job by id only): the late commit lands on
// a job a newer fence already completed, and CLAIM-I4 reports two
// completions, one under a stale fence.
var ExpiredOwner = lab.Experiment{
	ID:         "claim/expired-owner",
	Test:       "TestExpiredOwnerCannotCommitAnOldResult",
	Claim:      "an owner whose lease lapsed cannot commit its late result: the job's fence moved on, and the tool saw one effect",
	Invariants: []string{"claim"},
	Naive:      "the old owner's completion matches the job by id only, without AND fence = its fence",
	Catches:    []string{"CLAIM-I4", "CLAIM-I2"},
	Control:    "the same id-only completion by an owner that never stalls: its lease is live, nobody took over, one completion",
	Run:        runExpiredOwner,
	Explore:    expiredOwnerExplore,
}

func runExpiredOwner(x *lab.X) {
	l := newClaimLab(x, bookTool)
	ctx := context.Background()
	oldW, newW := l.worker(x, "worker-old"), l.worker(x, "worker-new")
	id := l.enqueue(x, oldW, claim.NewJob{Kind: workflow.KindName, BusinessKey: "wf-0042", Payload: workflow.Input{Input: "report"}})

	stalled := claimOne(x, oldW) // … the old owner stalls here, before its tool call.
	x.Step(lab.Step{Actor: "worker-old", Action: fmt.Sprintf("claim job %d", id), Outcome: lab.Accepted, Fence: stalled.Fence})
	if x.Control { // no stall: the naive completion under a live lease
		if err := naiveComplete(x, l, stalled); err != nil {
			x.Error("worker-old", "call the tool, commit the result", err)
			return
		}
		x.Step(lab.Step{Actor: "worker-old", Action: "call the tool, commit the result (matched by id only)", Outcome: lab.Accepted, Fence: stalled.Fence})
		x.Figure("effects", len(l.tool.EffectsFor(workflow.IdempotencyKey("wf-0042"))))
		return
	}
	x.Step(lab.Step{Actor: "worker-old", Action: "stall before the tool call", Outcome: "paused", Fence: stalled.Fence})

	_, err := l.pool.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 millisecond' WHERE id = $1`, id)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the old owner's lease lapses (set with SQL)", Fence: stalled.Fence})
	rec, err := newW.RecoverExpired(ctx, 100, time.Microsecond)
	require.NoError(x, err)
	require.Len(x, rec, 1)
	require.Equal(x, claim.StateUnknown, rec[0].State)
	x.Step(lab.Step{Actor: "worker-new", Action: "recover the expired job: it has side effects, so its outcome is unknown", Outcome: string(rec[0].State), Fence: rec[0].Fence})
	_, err = l.pool.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id) // the resolver's turn, now
	require.NoError(x, err)
	res, err := newW.ResolveUnknown(ctx, 100, 2)
	require.NoError(x, err)
	require.Equal(x, []claim.Resolved{{ID: id, Kind: workflow.KindName, State: claim.StateReady}}, res,
		"the tool authoritatively has no effect for the key: claim again")
	x.Step(lab.Step{Actor: "worker-new", Action: "ask the tool by key " + workflow.IdempotencyKey("wf-0042") + ": no effect", Outcome: string(claim.StateReady)})

	current := claimOne(x, newW)
	require.NoError(x, newW.Execute(ctx, current))
	x.Step(lab.Step{Actor: "worker-new", Action: fmt.Sprintf("claim job %d, call the tool, complete", id), Outcome: lab.Accepted, Fence: current.Fence})

	var lateErr error
	if x.Naive {
		lateErr = naiveComplete(x, l, stalled)
	} else {
		lateErr = oldW.Execute(ctx, stalled) // the old owner wakes up
	}
	step := lab.Step{Actor: "worker-old", Action: "wake: call the tool (same key), commit the result", Fence: stalled.Fence}
	switch {
	case errors.Is(lateErr, claim.ErrStaleFence):
		step.Outcome, step.Note = lab.Refused, fmt.Sprintf("stale fence: the job is at %d", current.Fence)
	case lateErr == nil && x.Naive && l.job(x, id).Fence != stalled.Fence:
		// Observed, not assumed: the commit went through while the job's
		// fence (read now) is another owner's.
		step.Outcome, step.Note = lab.Violates, fmt.Sprintf("committed with fence %d while the job is at fence %d: a stale result over the current owner's", stalled.Fence, l.job(x, id).Fence)
	case lateErr == nil:
		step.Outcome = lab.Accepted
	default:
		step.Outcome, step.Note = "error", lateErr.Error()
	}
	x.Step(step)
	x.Figure("old_fence", stalled.Fence)
	x.Figure("new_fence", current.Fence)
	x.Figure("old_write", step.Outcome)
	x.Figure("effects", len(l.tool.EffectsFor(workflow.IdempotencyKey("wf-0042"))))
	if x.Naive {
		return
	}
	require.ErrorIs(x, lateErr, claim.ErrStaleFence)
	require.Less(x, stalled.Fence, current.Fence)
	row := l.job(x, id)
	require.Equal(x, claim.StateSucceeded, row.State)
	require.Equal(x, current.Fence, row.Fence)
	require.Equal(x, "worker-new", row.Owner)
	h := l.history(x, id)
	x.Step(lab.Step{Actor: "db", Action: "job history: " + strings.Join(h, " "), Fence: row.Fence})
	require.Equal(x, []string{"claimed:1", "recovered:2", "resolving:3", "resolved_absent:3", "claimed:4", "succeeded:4", "rejected_stale:1"}, h)
	require.Len(x, l.tool.EffectsFor(workflow.IdempotencyKey("wf-0042")), 1, "one tool effect for the business key")
	require.Equal(x, 2, l.tool.Requests(fakeprovider.OpCreate), "both owners called the tool; the key made it one effect")
}

// naiveComplete is the old owner's late commit without the fence in the
// UPDATE, done by the experiment (the product's completion re-checks
// owner and fence): it overwrites the result and logs a completion under
// its own, stale fence.
func naiveComplete(x *lab.X, l claimLab, j *claim.Job) error {
	ctx := context.Background()
	var in workflow.Input
	if err := j.UnmarshalPayload(&in); err != nil {
		return err
	}
	e, err := l.tool.Client().Create(ctx, fakeprovider.CreateRequest{Key: workflow.IdempotencyKey(j.BusinessKey), Reference: j.BusinessKey, Data: in.Input})
	if err != nil {
		return err
	}
	// By id only, wherever the job is: still live, or already finished by
	// the new owner and moved to job_history.
	_, err = l.pool.Exec(ctx, `
		WITH live AS (
		    UPDATE job SET state = 'succeeded', owner = $2, result = $3, lease_until = NULL, updated_at = now()
		     WHERE id = $1
		    RETURNING id, state),
		finished AS (
		    UPDATE job_history SET state = 'succeeded', owner = $2, result = $3, lease_until = NULL
		     WHERE id = $1
		    RETURNING id, state),
		done AS (SELECT * FROM live UNION ALL SELECT * FROM finished)
		INSERT INTO job_event (job_id, event, fence, owner, state)
		SELECT id, 'succeeded', $4, $2, state FROM done`,
		j.ID, "worker-old", workflow.Result{EffectID: e.ID, Status: e.Status}, j.Fence)
	return err
}

// UnknownToReview: when the tool cannot be asked, an unknown job is neither
// failed nor run again: a human decides. The tool here committed the effect
// and dropped the response, so re-running would have made a second one.
var UnknownToReview = lab.Experiment{
	ID:         "claim/unknown-to-review",
	Test:       "TestUnknownWithoutQueryGoesToReview",
	Claim:      "a call whose outcome is unknown and cannot be asked about goes to needs_review, never run again",
	Invariants: []string{"claim"},
	NoNaive:    "running an unknown outcome again is the bug other chapters show with their naive versions; here there is only the one decision to show",
	Run:        runUnknownToReview,
}

func runUnknownToReview(x *lab.X) {
	l := newClaimLab(x, fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true}) // no query
	ctx := context.Background()
	noResolve := workflow.NewKind(l.tool.Client())
	noResolve.Name, noResolve.Resolve = "workflow.blind", nil
	w := l.worker(x, "worker-1", workflow.NewKind(l.tool.Client()), noResolve)
	l.tool.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, DropResponse: true})
	x.Say("provider", "commits every effect and drops the response; cannot be queried")

	for _, kind := range []string{workflow.KindName, "workflow.blind"} {
		id := l.enqueue(x, w, claim.NewJob{Kind: kind, BusinessKey: "wf-7-" + kind})
		j := claimOne(x, w, kind)
		require.NoError(x, w.Execute(ctx, j))
		require.Equal(x, claim.StateUnknown, l.job(x, id).State, "no response: the outcome is unknown")
		x.Step(lab.Step{Actor: "worker-1", Action: fmt.Sprintf("%s job %d: claim, call the tool: no response", kind, id), Outcome: string(claim.StateUnknown), Fence: j.Fence})

		_, err := l.pool.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id)
		require.NoError(x, err)
		res, err := w.ResolveUnknown(ctx, 10, 1)
		require.NoError(x, err)
		require.Equal(x, []claim.Resolved{{ID: id, Kind: kind, State: claim.StateNeedsReview}}, res)
		row := l.job(x, id)
		x.Step(lab.Step{Actor: "worker-1", Action: fmt.Sprintf("resolve job %d", id), Outcome: string(row.State), Fence: row.Fence, Note: row.LastErr})
		require.Equal(x, claim.StateNeedsReview, row.State)
		require.Equal(x, 1, row.Attempts, "never re-run")
		require.Equal(x, []string{"claimed:1", "unknown:1", "resolving:2", "needs_review:2"}, l.history(x, id))
	}
	// "Never run again", tried: both jobs made due now (so only their state
	// keeps them out), another worker runs a claim round and a resolve
	// round over every kind. Neither takes a job in review.
	_, err := l.pool.Exec(ctx, `UPDATE job SET due_at = now() - interval '1 second' WHERE state = $1`, claim.StateNeedsReview)
	require.NoError(x, err)
	w2 := l.worker(x, "worker-2", workflow.NewKind(l.tool.Client()), noResolve)
	later, err := w2.Claim(ctx, claim.ClaimParams{Kinds: []string{workflow.KindName, "workflow.blind"}, Limit: 10})
	require.NoError(x, err)
	require.Empty(x, later, "a later claim round takes no job in review")
	resolved, err := w2.ResolveUnknown(ctx, 10, 1)
	require.NoError(x, err)
	require.Empty(x, resolved, "a later resolve round takes no job in review")
	x.Step(lab.Step{Actor: "worker-2", Action: "claim round and resolve round over both kinds, jobs due now",
		Outcome: "no job", Note: "needs_review is not claimable"})
	for _, kind := range []string{workflow.KindName, "workflow.blind"} {
		var id int64
		require.NoError(x, l.pool.QueryRow(ctx, `SELECT id FROM job WHERE business_key = $1`, "wf-7-"+kind).Scan(&id))
		row := l.job(x, id)
		require.Equal(x, claim.StateNeedsReview, row.State, "still in review after the later rounds")
		require.Equal(x, 1, row.Attempts, "never re-run: one attempt after the later claim round")
		require.Equal(x, []string{"claimed:1", "unknown:1", "resolving:2", "needs_review:2"}, l.history(x, id), "no event since")
		require.Len(x, l.tool.EffectsFor(workflow.IdempotencyKey("wf-7-"+kind)), 1, "the effect happened once and was not repeated")
	}
	require.Equal(x, 1, l.tool.Requests(fakeprovider.OpQuery), "only the kind with a Resolve asked (and was refused)")
	require.Equal(x, 2, l.tool.Requests(fakeprovider.OpCreate), "one tool call per job, none after review")
	x.Figure("needs_review", 2)
	x.Figure("effects", len(l.tool.Effects()))
}

// RetriesBackOff: a tool that keeps answering 503. Each failed attempt
// pushes due_at out by an exponentially growing, jittered delay, the job is
// not claimable before it, and after max_attempts claims it fails for good.
var RetriesBackOff = lab.Experiment{
	ID:         "claim/retries-back-off",
	Test:       "TestRetriesBackOffAndStopAtMaxAttempts",
	Claim:      "a failing call is retried with exponential, jittered backoff and stops at max_attempts",
	Invariants: []string{"claim"},
	Run:        runRetriesBackOff,
}

func runRetriesBackOff(x *lab.X) {
	l := newClaimLab(x, bookTool)
	l.tool.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Status: 503})
	ctx := context.Background()
	w := l.worker(x, "worker-1")
	id := l.enqueue(x, w, claim.NewJob{Kind: workflow.KindName, BusinessKey: "wf-9", MaxAttempts: 3})
	x.Say("provider", "answers 503 to every call")

	var shares []float64 // each wait as a share of its exponential step d
	for attempt := 1; attempt <= 3; attempt++ {
		jobs, err := w.Claim(ctx, claim.ClaimParams{})
		require.NoError(x, err)
		require.Len(x, jobs, 1, "attempt %d", attempt)
		require.Equal(x, attempt, jobs[0].Attempts)
		require.NoError(x, w.Execute(ctx, jobs[0]))
		if attempt == 3 {
			x.Step(lab.Step{Actor: "worker-1", Action: fmt.Sprintf("attempt %d: 503", attempt), Outcome: string(l.job(x, id).State), Fence: jobs[0].Fence, Note: "max_attempts reached"})
			break
		}
		var wait time.Duration
		require.NoError(x, l.pool.QueryRow(ctx, `SELECT (due_at - updated_at) FROM job_all WHERE id = $1 AND state = 'ready'`, id).Scan(&wait))
		x.Step(lab.Step{Actor: "worker-1", Action: fmt.Sprintf("attempt %d: 503", attempt), Outcome: "retry scheduled", Fence: jobs[0].Fence, Note: "next try in " + wait.Round(time.Millisecond).String()})
		d := claim.BackoffBase << (attempt - 1)
		require.GreaterOrEqual(x, wait, d/2, "attempt %d backoff", attempt)
		require.LessOrEqual(x, wait, d, "attempt %d backoff", attempt)
		shares = append(shares, float64(wait)/float64(d))
		none, err := w.Claim(ctx, claim.ClaimParams{})
		require.NoError(x, err)
		require.Empty(x, none, "not claimable before its due_at")
		x.Step(lab.Step{Actor: "worker-1", Action: "claim before due_at", Outcome: "empty"})
		_, err = l.pool.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id) // jump to the boundary
		require.NoError(x, err)
		x.Say("db", "due_at reached (set to now() with SQL)")
	}
	row := l.job(x, id)
	require.Equal(x, claim.StateFailed, row.State)
	require.Equal(x, 3, row.Attempts)
	require.Contains(x, row.LastErr, "503")
	// "Jittered" is asserted, not assumed: a fixed delay (d, or any fixed
	// share of d) gives equal shares; jitter drawn from [d/2, d] gives two
	// equal shares to the microsecond with negligible odds.
	require.Len(x, shares, 2)
	require.NotEqual(x, shares[0], shares[1], "the backoff is not jittered: each wait is the same share of its step")
	x.Figure("backoff_shares", fmt.Sprintf("%.3f,%.3f", shares[0], shares[1]))
	none, err := w.Claim(ctx, claim.ClaimParams{})
	require.NoError(x, err)
	require.Empty(x, none)
	require.Equal(x, []string{"claimed:1", "retry_scheduled:1", "claimed:2", "retry_scheduled:2", "claimed:3", "failed:3"}, l.history(x, id))
	require.Equal(x, 3, l.tool.Requests(fakeprovider.OpCreate))
	require.Empty(x, l.tool.Effects())
	x.Figure("attempts", row.Attempts)
	x.Figure("state", string(row.State))
}

// RecoverExpired: 1,000 jobs whose owner died; two recoverers sweep them in
// batches at the same time, and each job is recovered by exactly one of
// them, once.
var RecoverExpired = lab.Experiment{
	ID:         "claim/recover-expired",
	Test:       "TestRecoverExpiredIsBatchedAndConcurrentSafe",
	Claim:      "two recoverers sweeping 1,000 expired jobs in batches recover each exactly once, effects to unknown, the rest to ready",
	Invariants: []string{"claim"},
	Run:        runRecoverExpired,
}

func runRecoverExpired(x *lab.X) {
	l := newClaimLab(x, bookTool)
	ctx := context.Background()
	pure := claim.Kind{Name: "t.pure", Handle: func(context.Context, *claim.Job) error { return nil }}
	effect := claim.Kind{Name: "t.effect", SideEffects: true, Handle: func(context.Context, *claim.Job) error { return nil }}
	dead := l.worker(x, "worker-dead", pure, effect)
	const n, batch = 1000, 50
	jobs := make([]claim.NewJob, n)
	for i := range jobs {
		jobs[i] = claim.NewJob{Kind: []string{"t.pure", "t.effect"}[i%2], BusinessKey: fmt.Sprintf("job-%04d", i)}
	}
	created, err := dead.EnqueueMany(ctx, l.pool, jobs)
	require.NoError(x, err)
	require.Equal(x, n, created)
	claimed, err := dead.Claim(ctx, claim.ClaimParams{Limit: n})
	require.NoError(x, err)
	require.Len(x, claimed, n)
	x.Step(lab.Step{Actor: "worker-dead", Action: fmt.Sprintf("claim %d jobs (half pure, half with side effects)", n), Outcome: lab.Accepted, Fence: 1})
	_, err = l.pool.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 second'`) // the owner died
	require.NoError(x, err)
	x.Say("db", "worker-dead's leases lapse (set with SQL): it died")

	recoverers := []*claim.Client{l.worker(x, "recoverer-1", pure, effect), l.worker(x, "recoverer-2", pure, effect)}
	got := make([][]claim.Recovered, 2)
	errs := make([]error, 2)
	lab.AtOnce(len(recoverers), func(i int) {
		r := recoverers[i]
		for {
			rec, err := r.RecoverExpired(ctx, batch, time.Second)
			if err != nil {
				errs[i] = err
				return
			}
			if len(rec) == 0 {
				return
			}
			if len(rec) > batch {
				errs[i] = fmt.Errorf("a batch of %d > %d", len(rec), batch)
				return
			}
			got[i] = append(got[i], rec...)
		}
	})
	require.NoError(x, errors.Join(errs...))
	seen := map[int64]int{}
	for i, rec := range got {
		x.Step(lab.Step{Actor: recoverers[i].Owner(), Action: fmt.Sprintf("recover in batches of %d", batch), Outcome: fmt.Sprintf("%d jobs", len(rec)), Fence: 2})
		for _, r := range rec {
			seen[r.ID]++
			want := claim.StateReady
			if r.Kind == "t.effect" {
				want = claim.StateUnknown
			}
			require.Equal(x, want, r.State, "job %d", r.ID)
			require.Equal(x, int64(2), r.Fence)
		}
	}
	require.Len(x, seen, n)
	for id, times := range seen {
		require.Equal(x, 1, times, "job %d", id)
	}
	recovered := l.count(x, `SELECT count(*) FROM job_event WHERE event = 'recovered'`)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d recovered events, %d unknown, %d ready", recovered,
		l.count(x, `SELECT count(*) FROM job_all WHERE state = 'unknown'`), l.count(x, `SELECT count(*) FROM job_all WHERE state = 'ready'`))})
	require.Equal(x, n, recovered)
	require.Equal(x, 0, l.count(x, `SELECT count(*) FROM job_all WHERE state = 'running'`))
	require.Equal(x, n/2, l.count(x, `SELECT count(*) FROM job_all WHERE state = 'unknown' AND fence = 2`))
	require.Equal(x, n/2, l.count(x, `SELECT count(*) FROM job_all WHERE state = 'ready' AND fence = 2 AND owner IS NULL`))
	// The re-dispatch is spread, not one burst.
	require.Greater(x, l.count(x, `SELECT count(DISTINCT date_trunc('milliseconds', due_at)) FROM job_all`), 100)
	x.Figure("jobs", n)
	x.Figure("recovered", recovered)
	x.Figure("recoverer_1", len(got[0]))
	x.Figure("recoverer_2", len(got[1]))
}

// PoolDrains: two worker pools of four goroutines drain 10,000 jobs; every
// job succeeds exactly once, with one claim and one completion event.
var PoolDrains = lab.Experiment{
	ID:         "claim/pool-drains",
	Test:       "TestWorkerPoolDrainsTenThousandJobs",
	Claim:      "two worker pools of four drain 10,000 jobs: each runs once, with one claim and one completion",
	Invariants: []string{"claim"},
	Run:        runPoolDrains,
}

func runPoolDrains(x *lab.X) {
	l := newClaimLab(x, bookTool)
	ctx := context.Background()
	var mu sync.Mutex
	runs := map[int64]int{}
	kind := claim.Kind{Name: "t.noop", Handle: func(_ context.Context, j *claim.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	}}
	a, b := l.worker(x, "pool-a", kind), l.worker(x, "pool-b", kind)
	const n = 10_000
	jobs := make([]claim.NewJob, n)
	for i := range jobs {
		jobs[i] = claim.NewJob{Kind: "t.noop", BusinessKey: fmt.Sprintf("job-%05d", i)}
	}
	created, err := a.EnqueueMany(ctx, l.pool, jobs)
	require.NoError(x, err)
	require.Equal(x, n, created)
	// What autovacuum does soon after a burst (see the job table's
	// storage parameters); without statistics the claim scan sorts.
	_, err = l.pool.Exec(ctx, `ANALYZE job`)
	require.NoError(x, err)
	x.Say("client", "enqueue %d jobs", n)

	begin := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range []*claim.Client{a, b} {
		wg.Go(func() { errs[i] = c.Work(ctx, claim.PoolOptions{Workers: 4, ExitWhenIdle: true}) })
	}
	wg.Wait()
	require.NoError(x, errors.Join(errs...))
	elapsed := time.Since(begin)
	for _, owner := range []string{"pool-a", "pool-b"} {
		x.Step(lab.Step{Actor: owner, Action: "4 workers claim and run until idle",
			Outcome: fmt.Sprintf("%d jobs", l.count(x, `SELECT count(*) FROM job_all WHERE owner = $1`, owner))})
	}
	x.Logf("drained %d jobs with 2 pools × 4 workers in %v (%.0f jobs/s; not a benchmark: see fencelab bench claim)", n, elapsed, n/elapsed.Seconds())

	require.Len(x, runs, n)
	for id, k := range runs {
		require.Equal(x, 1, k, "job %d ran %d times", id, k)
	}
	succeeded := l.count(x, `SELECT count(*) FROM job_all WHERE state = 'succeeded' AND fence = 1 AND attempts = 1`)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d jobs succeeded at fence 1 on their first attempt", succeeded)})
	require.Equal(x, n, succeeded)
	require.Equal(x, n, l.count(x, `SELECT count(*) FROM job_event WHERE event = 'claimed'`))
	require.Equal(x, n, l.count(x, `SELECT count(*) FROM job_event WHERE event = 'succeeded'`))
	require.Equal(x, 0, l.count(x, `SELECT count(*) FROM job_event WHERE event = 'rejected_stale'`))
	require.Positive(x, l.count(x, `SELECT count(*) FROM job_all WHERE owner = 'pool-a'`))
	require.Positive(x, l.count(x, `SELECT count(*) FROM job_all WHERE owner = 'pool-b'`))
	x.Figure("jobs", n)
	x.Figure("runs", len(runs))
	x.Figure("claims", n)
}

// LostHeartbeat: a heartbeat that finds the lease gone cancels the
// handler's context; the handler's late result is refused.
var LostHeartbeat = lab.Experiment{
	ID:         "claim/lost-heartbeat",
	Test:       "TestLostHeartbeatCancelsTheHandler",
	Claim:      "a heartbeat that finds the job's fence moved cancels the running handler, and its late result is refused",
	Invariants: []string{"claim"},
	Run:        runLostHeartbeat,
}

func runLostHeartbeat(x *lab.X) {
	l := newClaimLab(x, bookTool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan int64, 1)
	stopped := make(chan error, 1)
	kind := claim.Kind{Name: "t.slow", Handle: func(ctx context.Context, j *claim.Job) error {
		started <- j.ID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return ctx.Err()
	}}
	w := l.worker(x, "worker-1", kind)
	id := l.enqueue(x, w, claim.NewJob{Kind: "t.slow", BusinessKey: "slow-1"})
	done := make(chan error, 1)
	go func() {
		done <- w.Work(ctx, claim.PoolOptions{Workers: 1, Lease: 300 * time.Millisecond, NoListen: true, PollInterval: 10 * time.Millisecond})
	}()
	require.Equal(x, id, lab.WaitOrTimeout(x, started, "the job never started"))
	x.Step(lab.Step{Actor: "worker-1", Action: fmt.Sprintf("claim job %d, run a long handler (lease 300ms, heartbeats)", id), Outcome: lab.Accepted, Fence: 1})
	// Another party takes the job over (as a recovery would): the fence moves.
	_, err := l.pool.Exec(context.Background(), `UPDATE job SET fence = fence + 1 WHERE id = $1`, id)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "another party takes the job over: the fence moves", Fence: 2})
	cause := lab.WaitOrTimeout(x, stopped, "the handler was not cancelled")
	require.True(x, errors.Is(cause, claim.ErrStaleFence), "cause: %v", cause)
	x.Step(lab.Step{Actor: "worker-1", Action: "heartbeat: the fence moved; cancel the handler", Outcome: "cancelled", Fence: 1, Note: cause.Error()})
	cancel()
	require.NoError(x, <-done)
	h := l.history(x, id)
	x.Step(lab.Step{Actor: "db", Action: "job history: " + strings.Join(h, " ")})
	require.Equal(x, []string{"claimed:1", "heartbeat_lost:1", "rejected_stale:1"}, h)
	x.Figure("handler", "cancelled")
	x.Figure("late_result", "refused")
}
