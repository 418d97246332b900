// Package docs runs the documentation: every shell block of README.md and
// docs/**/*.md, in reading order, against a real `fencelab dev` on a
// scratch data directory — the newcomer's path, checked on every
// `go test ./...`.
//
// The conventions (docs/DEVELOPING.md, "Docs that run", says the same):
//
//   - A block fenced ```sh, ```bash or ```shell runs; ```sh no-run does not
//     (a long benchmark, `go test`, `dev` itself, a second terminal). The
//     text around such a block says why; the test lists them.
//   - `go run ./cmd/fencelab ARGS` runs the freshly built binary, and
//     `localhost:8080` is the test's dev server. The environment is
//     `eval "$(fencelab env)"`: DATABASE_URL, FENCELAB_TOKEN_SECRET, USER42,
//     ADMIN, SVC.
//   - Every curl must answer 1xx–3xx, unless its line ends with a comment
//     that starts with the expected status (`curl … # 409 already_holding`).
//   - A block fenced ```output right after a shell block is that block's
//     expected stdout, line for line; `…` in it matches any text.
//   - Blocks share one shell, so a variable set in one block (SID=…) is
//     there in the next.
//
// After the last block, every SQL invariant must hold on the dev database,
// and a second `dev` on the same data must come up with the reader's
// changes in place (no seed skipped).
package docs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/program"
)

// block is one fenced shell block.
type block struct {
	file   string
	line   int
	text   string
	noRun  bool
	expect *string // the ```output block that follows, if any
}

func (b block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docFiles is the reading order: README.md, the chapters in order, then
// the rest of docs/ alphabetically.
func docFiles(t *testing.T, root string) []string {
	files := []string{"README.md"}
	var chapters, rest []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if strings.HasPrefix(rel, filepath.Join("docs", "chapters")+string(filepath.Separator)) {
			chapters = append(chapters, rel)
		} else {
			rest = append(rest, rel)
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(chapters)
	sort.Strings(rest)
	return append(append(files, chapters...), rest...)
}

var fenceRe = regexp.MustCompile("^(\\s*)```+\\s*([A-Za-z0-9_-]*)(.*)$")

// parse returns the shell blocks of one Markdown file.
func parse(file, text string) ([]block, error) {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceRe.FindStringSubmatch(lines[i])
		if m == nil || strings.Contains(m[3], "`") { // an info string never holds a backtick: inline code
			continue
		}
		lang, info := m[2], strings.Fields(m[3])
		start := i
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s:%d: unclosed code fence", file, start+1)
		}
		switch lang {
		case "sh", "bash", "shell":
			b := block{file: file, line: start + 1, text: strings.Join(body, "\n")}
			for _, w := range info {
				if w == "no-run" {
					b.noRun = true
				}
			}
			out = append(out, b)
		case "output":
			if len(out) == 0 || !precededOnlyByBlank(lines, out[len(out)-1], start) {
				return nil, fmt.Errorf("%s:%d: an ```output block must follow a shell block directly", file, start+1)
			}
			exp := strings.Join(body, "\n")
			out[len(out)-1].expect = &exp
		}
	}
	return out, nil
}

// precededOnlyByBlank reports whether only blank lines separate the end of
// b from line start.
func precededOnlyByBlank(lines []string, b block, start int) bool {
	end := b.line + strings.Count(b.text, "\n") + 1 // the closing fence (0-based index of it)
	for i := end + 1; i < start; i++ {
		if strings.TrimSpace(lines[i]) != "" {
			return false
		}
	}
	return true
}

// statusRe finds "curl … # 409 …": the expected status of that curl.
var statusRe = regexp.MustCompile(`^(\s*)(curl\b.*#\s*)(\d{3})\b`)

// prepare rewrites a block for the test's shell: logical lines joined
// (backslash continuations), the expected status of a curl passed to the
// wrapper, the dev address substituted.
func prepare(text, addr string) string {
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	for i, l := range lines {
		if m := statusRe.FindStringSubmatch(l); m != nil {
			lines[i] = m[1] + "EXPECT_STATUS=" + m[3] + " " + strings.TrimPrefix(l, m[1])
		}
		lines[i] = strings.NewReplacer("localhost:8080", addr, "127.0.0.1:8080", addr).Replace(lines[i])
	}
	return strings.Join(lines, "\n")
}

// prelude defines the shell the blocks run in.
const prelude = `
set -eo pipefail
go() {
  if [ "$1" = run ] && [ "$2" = ./cmd/fencelab ]; then
    shift 2
    # In a subshell (a background job, $(…)) become the binary, so that
    # kill $! reaches it.
    if [ "$BASHPID" != "$$" ]; then exec "$FENCELAB_BIN" "$@"; fi
    "$FENCELAB_BIN" "$@"; return
  fi
  if [ "$1" = build ] && [ "$2" = -o ] && [ "$4" = ./cmd/fencelab ]; then cp "$FENCELAB_BIN" "$3"; return; fi
  echo "docs test: only 'go run ./cmd/fencelab …' and 'go build -o NAME ./cmd/fencelab' run here; mark the block no-run: go $*" >&2
  return 1
}
curl() {
  local h rc code
  h=$(mktemp)
  rc=0
  command curl -sS -D "$h" "$@" || rc=$?
  code=$(awk '/^HTTP\//{c=$2} END{print c}' "$h")
  rm -f "$h"
  if [ "$rc" -ne 0 ]; then echo "docs test: curl failed (exit $rc): curl $*" >&2; return "$rc"; fi
  if [ -n "${EXPECT_STATUS:-}" ]; then
    if [ "$code" != "$EXPECT_STATUS" ]; then echo "docs test: expected HTTP $EXPECT_STATUS, got $code: curl $*" >&2; return 1; fi
  elif [ "${code:-0}" -ge 400 ]; then
    echo "docs test: HTTP $code (a curl without '# NNN' must succeed): curl $*" >&2; return 1
  fi
}
eval "$("$FENCELAB_BIN" env)"
`

// TestMain removes what e2etest made (the binary, when this process built it).
func TestMain(m *testing.M) { e2etest.Main(m) }

// TestDocsExamplesRunInOrder is the newcomer path: dev, every documented
// command in order, the invariants, dev again.
func TestDocsExamplesRunInOrder(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq", "psql", "sha256sum", "split", "awk"} {
		_, err := exec.LookPath(tool)
		require.NoErrorf(t, err, "the docs use %s: install it (apt-get install curl jq postgresql-client coreutils gawk)", tool)
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)

	var blocks []block
	for _, f := range docFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		bs, err := parse(f, string(b))
		require.NoError(t, err)
		blocks = append(blocks, bs...)
	}
	var run, skipped []block
	for _, b := range blocks {
		if b.noRun {
			skipped = append(skipped, b)
		} else {
			run = append(run, b)
		}
	}
	require.NotEmpty(t, run, "no shell blocks found in the docs")
	for _, b := range skipped {
		t.Logf("no-run: %s", b.where())
	}
	// The excluded set stays small: each one is a command the reader runs
	// that this test cannot (dev itself, go test, long benchmarks, a second
	// terminal). Raise this only with a reason in the docs next to the block.
	require.LessOrEqualf(t, len(skipped), 16, "%d no-run blocks: make them runnable", len(skipped))

	scratch := e2etest.ScratchDir(t, "fencelab-docs-")
	dataDir, work := filepath.Join(scratch, "data"), filepath.Join(scratch, "work")
	require.NoError(t, os.MkdirAll(work, 0o755))
	phase := time.Now()
	bin := e2etest.Binary(t) // ./test's one build (FENCELAB_TEST_BINARY), else built here
	t.Logf("the binary: %v", time.Since(phase).Round(100*time.Millisecond))

	addr := freeAddr(t)
	// A port of its own for the dev cluster (dev keeps it in pg-port): two
	// devs starting at once both see the preferred 54329 free, and the
	// loser's start-up would reach the winner's postmaster.
	require.NoError(t, os.MkdirAll(dataDir, 0o755))
	_, pgPort, _ := net.SplitHostPort(freeAddr(t))
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "pg-port"), []byte(pgPort+"\n"), 0o644))
	env := append(cleanEnv(), "FENCELAB_DATA_DIR="+dataDir, "FENCELAB_BIN="+bin)
	phase = time.Now()
	dev := startDev(t, bin, work, env, addr)
	t.Logf("first dev ready: %v", time.Since(phase).Round(100*time.Millisecond))

	// One shell for every block, a marker line between them.
	var script strings.Builder
	script.WriteString(prelude)
	// Each block's start time goes to a file of its own (never to the
	// block's output, which is compared with the docs): the slowest blocks
	// are logged, so the suite's time can be read, not guessed.
	timesFile := filepath.Join(scratch, "block-times")
	for i, b := range run {
		fmt.Fprintf(&script, "\necho \"%d $EPOCHREALTIME\" >>%q\n", i, timesFile)
		fmt.Fprintf(&script, "\nprintf '\\n@@DOCS-BLOCK %d@@\\n'; printf '\\n@@DOCS-BLOCK %d@@\\n' >&2\n", i, i)
		script.WriteString(prepare(b.text, addr))
		script.WriteString("\n")
	}
	fmt.Fprintf(&script, "\necho \"%d $EPOCHREALTIME\" >>%q\n", len(run), timesFile)
	fmt.Fprintf(&script, "\nprintf '\\n@@DOCS-BLOCK %d@@\\n'\n", len(run))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script.String())
	sh.Dir, sh.Env = work, env
	// The blocks run in a process group of their own, killed as a whole
	// afterwards: a demo's background process must not outlive the test
	// (and reach the next dev that takes the same port).
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh.Cancel = func() error { return syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	shErr := sh.Run()
	if sh.Process != nil {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
	}

	outs := splitMarked(stdout.String())
	errs := splitMarked(stderr.String())
	if shErr != nil {
		last := len(outs) - 1
		for last >= 0 && outs[last] == nil {
			last--
		}
		where := "the prelude"
		if last >= 0 && last < len(run) {
			where = run[last].where()
		}
		t.Fatalf("the docs stop at %s (%v)\n--- block ---\n%s\n--- stdout ---\n%s\n--- stderr ---\n%s\n--- logs the block wrote ---\n%s--- dev database sessions ---\n%s\n--- dev log (tail) ---\n%s",
			where, shErr, blockText(run, last), tail(outAt(outs, last), 3000), tail(outAt(errs, last), 3000), workLogs(work),
			sessions(dataDir), tail(dev.log(), 3000))
	}
	require.Len(t, outs, len(run)+1, "a block's output was lost")
	for i, b := range run {
		if b.expect == nil {
			continue
		}
		if msg := compare(*b.expect, *outs[i]); msg != "" {
			t.Errorf("%s: the output differs from the documented one: %s\n--- got ---\n%s\n--- documented ---\n%s",
				b.where(), msg, *outs[i], *b.expect)
		}
	}
	t.Logf("ran %d blocks (%d compared with documented output), %d marked no-run", len(run), countExpect(run), len(skipped))
	logSlowestBlocks(t, run, timesFile, 5)

	// The docs leave a consistent database behind.
	dbURL := e2etest.ReadEnvFile(t, filepath.Join(dataDir, "env"))["DATABASE_URL"]
	pool, err := pg.Connect(context.Background(), dbURL, pg.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	program.Invariants().Assert(t, pool)
	pool.Close()

	// Ctrl-C, then dev again on the same data: it comes up, seeds nothing
	// over the reader's changes, and skips nothing.
	phase = time.Now()
	dev.stop(t)
	again := startDev(t, bin, work, env, addr)
	require.NotContains(t, again.log(), "skipped", "the second dev skipped a seed")
	again.stop(t)
	t.Logf("stop, second dev, stop: %v", time.Since(phase).Round(100*time.Millisecond))
}

// devProc is a running `fencelab dev`.
type devProc struct {
	cmd  *exec.Cmd
	out  e2etest.LockedBuffer
	done chan struct{}
}

func (d *devProc) log() string { return d.out.String() }

func (d *devProc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("dev did not stop within 60 s of Ctrl-C\n%s", tail(d.log(), 2000))
	}
}

func startDev(t *testing.T, bin, dir string, env []string, addr string) *devProc {
	t.Helper()
	d := &devProc{done: make(chan struct{})}
	d.cmd = exec.Command(bin, "dev", "--addr", addr)
	d.cmd.Dir, d.cmd.Env = dir, env
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	require.NoError(t, d.cmd.Start())
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-d.done:
			t.Fatalf("dev exited before it was ready\n%s", d.log())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev not ready after 3 minutes\n%s", d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// cleanEnv is the test's environment without anything that would point the
// docs elsewhere than the scratch dev.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FENCELAB_LOG_LEVEL=") { // kept: FENCELAB_LOG_LEVEL=debug go test … to see more
			out = append(out, kv)
			continue
		}
		if strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "FENCELAB_") ||
			strings.HasPrefix(kv, "USER42=") || strings.HasPrefix(kv, "ADMIN=") || strings.HasPrefix(kv, "SVC=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

var markerRe = regexp.MustCompile(`(?m)^@@DOCS-BLOCK (\d+)@@\n`)

// splitMarked cuts a stream at the marker lines: out[i] is what block i
// wrote (nil when the block never started).
func splitMarked(s string) []*string {
	locs := markerRe.FindAllStringSubmatchIndex(s, -1)
	var out []*string
	for k, loc := range locs {
		n, _ := strconv.Atoi(s[loc[2]:loc[3]])
		for len(out) <= n {
			out = append(out, nil)
		}
		end := len(s)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		chunk := strings.TrimSuffix(s[loc[1]:end], "\n") // the marker's leading newline
		out[n] = &chunk
	}
	return out
}

func outAt(outs []*string, i int) string {
	if i < 0 || i >= len(outs) || outs[i] == nil {
		return ""
	}
	return *outs[i]
}

func blockText(run []block, i int) string {
	if i < 0 || i >= len(run) {
		return ""
	}
	return run[i].text
}

// compare matches got against the documented lines; "…" matches any text.
func compare(want, got string) string {
	wl := strings.Split(strings.TrimRight(want, "\n"), "\n")
	gl := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if len(wl) != len(gl) {
		return fmt.Sprintf("%d lines, documented %d", len(gl), len(wl))
	}
	for i := range wl {
		parts := strings.Split(wl[i], "…")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		if !regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(gl[i]) {
			return fmt.Sprintf("line %d: %q does not match %q", i+1, gl[i], wl[i])
		}
	}
	return ""
}

// sessions lists what every connection to the dev database is doing (a
// demo that hangs is usually waiting for a lock).
func sessions(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, "env"))
	if err != nil {
		return err.Error()
	}
	var url string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "DATABASE_URL="); ok {
			url = v
		}
	}
	out, _ := exec.Command("psql", url, "-c", `SELECT pid, application_name, state, wait_event_type, wait_event,
	       now() - xact_start AS in_xact, left(query, 100) AS query
	  FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY xact_start NULLS LAST`).CombinedOutput()
	return string(out)
}

// workLogs is the tail of each *.log a block wrote in the work directory
// (background processes of a demo).
func workLogs(dir string) string {
	var sb strings.Builder
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		fmt.Fprintf(&sb, "%s:\n%s\n", filepath.Base(l), tail(string(b), 1500))
	}
	return sb.String()
}

func countExpect(bs []block) int {
	n := 0
	for _, b := range bs {
		if b.expect != nil {
			n++
		}
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// logSlowestBlocks logs the n blocks that took longest, from the start
// times the script wrote (block i ends when block i+1 starts).
func logSlowestBlocks(t *testing.T, run []block, path string, n int) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	start := map[int]float64{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var i int
		var at float64
		if _, err := fmt.Sscanf(line, "%d %f", &i, &at); err == nil {
			start[i] = at
		}
	}
	type took struct {
		where string
		secs  float64
	}
	var all []took
	for i := range run {
		a, okA := start[i]
		z, okZ := start[i+1]
		if okA && okZ {
			all = append(all, took{run[i].where(), z - a})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].secs > all[j].secs })
	var total float64
	for _, x := range all {
		total += x.secs
	}
	t.Logf("blocks took %.1fs in all; the slowest:", total)
	for i := 0; i < n && i < len(all); i++ {
		t.Logf("  %6.2fs  %s", all[i].secs, all[i].where)
	}
}
