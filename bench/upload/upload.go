// Package upload is `fencelab bench upload`: one file sent over HTTP in
// chunks to a real `fencelab serve` process — create the session, PUT every
// chunk (several at a time), complete (which finishes the running SHA-256,
// verifies it against the declaration and renames the file into the blob
// store) — timed from the first request to the completion's answer. The
// ceiling is dd writing the same number of bytes to the same directory with
// conv=fsync, in the same run; rounds alternate the two (dd, upload, dd,
// upload, …) so drift on a shared machine hits both alike, and the result
// is the median of the per-round ratios.
//
// Server CPU. The server is a child process, so what it spends is its own
// and not the load generator's: before and after each upload the bench
// reads the child's utime + stime from /proc/<pid>/stat (every thread of
// the process, exited ones included, user and kernel time — the socket
// reads, page-cache writes and fsyncs done on the server's behalf count),
// and divides the difference by the GiB uploaded (cpu_s_per_gib, the
// RESULT's figure). The child also runs its background tasks (outbox
// pollers and the like) during the window, so that figure is an upper
// bound on what the upload path costs; the table also shows the child's
// CPU rate while dd runs (the server idles then) and the upload's CPU less
// that rate over the upload's duration ("net"), and the floor measured in
// the same round (floor.go): what receiving, hashing and storing the same
// bytes costs one thread with nothing else around it. Its peak RSS
// (VmHWM) is read from /proc the same way. The client sends every chunk
// from a file with sendfile, so it adds next to nothing to the machine's
// load.
//
// Each round sends a file that differs from the others in its first chunk
// (so a round never replaces the previous round's blob, which would put an
// unlink inside the timed completion), and every session is committed after
// the timed rounds; a second `fencelab serve` with one worker then
// processes and publishes the files (the fenced publish, UP-F3), and the
// upload and claim invariants are checked: a violation fails the run and no
// RESULT line is printed.
package upload

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/services/upload"
)

// Bench is `fencelab bench upload`.
var Bench = app.Bench{Name: "upload", Summary: "chunked upload of a large file against dd on the same disk", Run: Run}

// Run runs the benchmark against a child `fencelab serve` (the real binary).
func Run(mods []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench upload", flag.ContinueOnError)
	sizeFlag := fs.String("size", "256MiB", "file size")
	chunkFlag := fs.String("chunk", "8MiB", "chunk size")
	parallel := fs.Int("parallel", 4, "chunk PUTs in flight at once (1: strictly in order, every chunk hashed as it is written)")
	rounds := fs.Int("rounds", 3, "rounds, at least 3 (each: dd, then the upload); medians are reported")
	dir := fs.String("dir", filepath.Join(app.Env("FENCELAB_DATA_DIR", ".fencelab"), "bench-upload"),
		"working directory: source file, dd's output and the server's blob store (one disk); removed afterwards")
	shared := setup.Add(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	size, err := upload.ParseSize(*sizeFlag)
	if err != nil {
		return err
	}
	chunk, err := upload.ParseSize(*chunkFlag)
	if err != nil {
		return err
	}
	if size < 1 || chunk < 1 || *parallel < 1 {
		return errors.New("size, chunk and parallel must be positive")
	}
	if *rounds < 3 {
		return errors.New("rounds must be at least 3: the result is the median of alternating rounds")
	}
	invs, err := app.Invariants(mods)
	if err != nil {
		return err
	}
	// Ctrl-C ends the run cleanly: the child server and the cluster stop.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	work, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o750); err != nil {
		return err
	}
	defer os.RemoveAll(work)

	srv, url, err := shared.Database(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	fsync, err := showFsync(ctx, url)
	if err != nil {
		return err
	}

	source := filepath.Join(work, "source.bin")
	sourceSum, err := writeSource(source, size)
	if err != nil {
		return err
	}
	parts, err := splitSource(source, filepath.Join(work, "chunks"), size, chunk)
	if err != nil {
		return err
	}
	s, err := startServer(ctx, url, work, size, chunk, 0)
	if err != nil {
		return err
	}
	defer func() {
		if s != nil {
			s.Stop()
		}
	}()

	count := (size + chunk - 1) / chunk
	fmt.Printf("fencelab bench upload — %s in %d chunks of %s, %d PUTs in flight; %s PostgreSQL (fsync=%s);\n",
		upload.FormatSize(size), count, upload.FormatSize(chunk), *parallel, srv.Strategy, fsync)
	fmt.Printf("server: `fencelab serve` child process (pid %d, workers off), load generator in this process, one %d-core machine shared with other work\n",
		s.Cmd.Process.Pid, runtime.NumCPU())
	fmt.Printf("ceiling: dd if=source of=%s bs=%s conv=fsync (as many bytes, the same directory); MB = 10^6 bytes\n",
		filepath.Join(work, "dd.out"), upload.FormatSize(chunk))
	fmt.Printf("server CPU: the child's utime+stime (/proc/<pid>/stat) across each upload, per GiB uploaded; idle CPU: the child's\n" +
		"CPU across dd (its background tasks, in %% of a core); net: CPU per GiB less the idle rate over the upload's time;\n" +
		"floor: one thread of this process receiving the same bytes over loopback TCP (sendfile), hashing them with SHA-256\n" +
		"and writing them into a blob-store partial file (fallocate, fsync per chunk), nothing else: its CPU per GiB\n\n")

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tdd MB/s\tupload MB/s\tof ceiling\tupload time\tof which complete\tserver CPU\tCPU s/GiB\tidle CPU\tnet s/GiB\tfloor s/GiB\thashed as written\tread back\t")
	var dds, ups, ratios, cpus, nets, floors []float64
	var sessions []string
	for i := range *rounds {
		// dd runs while the server idles: its CPU across dd is what its
		// background tasks (outbox pollers and the like) cost per second.
		idle0, err := s.cpu()
		if err != nil {
			return err
		}
		ddStart := time.Now()
		ddRate, err := ddOnce(source, filepath.Join(work, "dd.out"), chunk, size)
		if err != nil {
			return err
		}
		idle1, err := s.cpu()
		if err != nil {
			return err
		}
		idleRate := (idle1 - idle0).Seconds() / time.Since(ddStart).Seconds()
		floorCPU, floorSum, err := floorOnce(ctx, source, filepath.Join(work, "floor"), size, chunk)
		if err != nil {
			return err
		}
		if !bytes.Equal(floorSum, sourceSum) {
			return fmt.Errorf("floor: the bytes received hash to %x, the source to %x", floorSum, sourceSum)
		}
		// This round's file: the source with its own first chunk.
		first, digest, err := roundFile(source, filepath.Join(work, "chunks"), i, size, chunk)
		if err != nil {
			return err
		}
		files := append([]string{first}, parts[1:]...)
		h0, err := s.hashed(ctx)
		if err != nil {
			return err
		}
		cpu0, err := s.cpu()
		if err != nil {
			return err
		}
		id, took, completing, err := s.upload(ctx, files, size, chunk, digest, *parallel)
		if err != nil {
			return err
		}
		cpu1, err := s.cpu()
		if err != nil {
			return err
		}
		h1, err := s.hashed(ctx)
		if err != nil {
			return err
		}
		sessions = append(sessions, id)
		upRate := float64(size) / took.Seconds() / 1e6
		cpu := cpu1 - cpu0
		gib := float64(size) / (1 << 30)
		perGiB := cpu.Seconds() / gib
		netPerGiB := (cpu.Seconds() - idleRate*took.Seconds()) / gib
		dds, ups, ratios = append(dds, ddRate), append(ups, upRate), append(ratios, upRate/ddRate)
		floorPerGiB := floorCPU.Seconds() / gib
		cpus, nets, floors = append(cpus, perGiB), append(nets, netPerGiB), append(floors, floorPerGiB)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%v\t%v\t%v\t%.2f\t%.0f%%\t%.2f\t%.2f\t%s\t%s\t\n", i+1, ddRate, upRate, upRate/ddRate,
			took.Round(time.Millisecond), completing.Round(time.Millisecond), cpu.Round(10*time.Millisecond), perGiB,
			100*idleRate, netPerGiB, floorPerGiB, upload.FormatSize(int64(h1.streamed-h0.streamed)), upload.FormatSize(int64(h1.reread-h0.reread)))
	}
	fmt.Fprintf(tw, "median\t%.0f\t%.0f\t%.2f\t\t\t\t%.2f\t\t%.2f\t%.2f\t\t\t\n", load.Median(dds), load.Median(ups), load.Median(ratios), load.Median(cpus), load.Median(nets), load.Median(floors))
	tw.Flush()
	hwm, rss, err := s.memory()
	if err != nil {
		return err
	}
	fmt.Printf("\nserver peak RSS (VmHWM, whole run, start-up included): %s; RSS now: %s\n", upload.FormatSize(hwm), upload.FormatSize(rss))

	// Untimed: commit every round's file, publish them with a worker, and
	// check that every invariant of upload (and of the claim engine that
	// ran the processing) holds.
	if err := s.commitAll(ctx, sessions); err != nil {
		return err
	}
	s.Stop()
	if s, err = startServer(ctx, url, work, size, chunk, 1); err != nil {
		s = nil
		return err
	}
	published, err := s.awaitPublished(ctx, sessions)
	if err != nil {
		return err
	}
	s.Stop()
	if err := checkInvariants(ctx, url, invs); err != nil {
		return err
	}
	fmt.Printf("after the rounds: %d files committed and published by a worker; upload and claim invariants hold\n\n", published)
	load.Result("upload", "ratio", load.Median(ratios), "upload_mb_s", fmt.Sprintf("%.0f", load.Median(ups)),
		"dd_mb_s", fmt.Sprintf("%.0f", load.Median(dds)), "cpu_s_per_gib", load.Median(cpus), "cpu_net_s_per_gib", load.Median(nets),
		"floor_cpu_s_per_gib", load.Median(floors), "rounds", *rounds,
		"size", compactSize(size), "chunk", compactSize(chunk))
	return nil
}

// compactSize writes n as RESULT values want it: one token (256MiB, 8MiB,
// 1500000B).
func compactSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// checkInvariants runs the upload and claim invariants on the bench's
// database and fails with every violation found.
func checkInvariants(ctx context.Context, url string, invs *invariant.Registry) error {
	pool, err := pg.Connect(ctx, url, pg.PoolOptions{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	results := invs.Run(ctx, pool, "upload", "claim")
	if len(results) == 0 {
		return errors.New("no upload invariants registered")
	}
	if invariant.Print(os.Stdout, results) > 0 {
		return errors.New("invariants violated after the run (see above)")
	}
	return nil
}

func showFsync(ctx context.Context, url string) (string, error) {
	pool, err := pg.Connect(ctx, url, pg.PoolOptions{MaxConns: 1})
	if err != nil {
		return "", err
	}
	defer pool.Close()
	var v string
	err = pool.QueryRow(ctx, `SHOW fsync`).Scan(&v)
	return v, err
}

// writeSource writes size pseudo-random bytes to path (incompressible, so
// no layer can cheat) and returns their SHA-256. The file stays in the page cache: both dd and the
// upload read it from memory.
func writeSource(path string, size int64) ([]byte, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(w, h), mrand.NewChaCha8(seed), size); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return h.Sum(nil), f.Sync()
}

// roundFile writes round's own first chunk (fresh random bytes) next to
// the split source and returns its path and the SHA-256 of the round's
// file: that chunk followed by the source's other chunks.
func roundFile(source, dir string, round int, size, chunk int64) (string, string, error) {
	path := filepath.Join(dir, fmt.Sprintf("first-%d", round))
	first := make([]byte, min(chunk, size))
	if _, err := rand.Read(first); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(path, first, 0o640); err != nil {
		return "", "", err
	}
	src, err := os.Open(source)
	if err != nil {
		return "", "", err
	}
	defer src.Close()
	h := sha256.New()
	h.Write(first)
	if _, err := io.Copy(h, io.NewSectionReader(src, int64(len(first)), size-int64(len(first)))); err != nil {
		return "", "", err
	}
	return path, hex.EncodeToString(h.Sum(nil)), nil
}

// splitSource copies the source into one file per chunk, so that every
// chunk PUT's body is a whole file: net/http then sends it with sendfile.
func splitSource(source, dir string, size, chunk int64) ([]string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	src, err := os.Open(source)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var parts []string
	for off := int64(0); off < size; off += chunk {
		p := filepath.Join(dir, fmt.Sprintf("%06d", len(parts)))
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(f, io.NewSectionReader(src, off, min(chunk, size-off)))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// ddOnce writes the source to out with dd (conv=fsync: the data is on disk
// when dd exits, as an upload's is when complete answers) and returns MB/s.
func ddOnce(source, out string, bs, size int64) (float64, error) {
	defer os.Remove(out)
	cmd := exec.Command("dd", "if="+source, "of="+out, "bs="+strconv.FormatInt(bs, 10), "conv=fsync")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("dd: %w: %s", err, b)
	}
	return float64(size) / time.Since(start).Seconds() / 1e6, nil
}

// server is the `fencelab serve` child.
type server struct {
	*setup.Serve
	token  string
	client *http.Client
}

// startServer starts `fencelab serve` on the bench's database and blob
// store; workers is FENCELAB_WORKERS (0 while timing: no claim polling).
func startServer(ctx context.Context, dbURL, work string, size, chunk int64, workers int) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	auth, err := httpx.NewAuth([]byte(hex.EncodeToString(secret)))
	if err != nil {
		return nil, err
	}
	token, err := auth.Mint("user-0042", httpx.RoleUser, time.Hour)
	if err != nil {
		return nil, err
	}
	addr, err := setup.LoopbackAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "serve")
	cmd.Env = append(childEnv(), "DATABASE_URL="+dbURL, "FENCELAB_TOKEN_SECRET="+hex.EncodeToString(secret),
		"FENCELAB_ADDR="+addr, "FENCELAB_WORKERS="+strconv.Itoa(workers), "FENCELAB_ACCESS_LOG=false", "FENCELAB_LOG_LEVEL=warn",
		"FENCELAB_DATA_DIR="+filepath.Join(work, "server"),
		upload.EnvMaxFileSize+"="+strconv.FormatInt(max(size, 1<<20), 10),
		upload.EnvMaxChunkSize+"="+strconv.FormatInt(max(chunk, 1<<20), 10),
		upload.EnvMaxChunks+"="+strconv.FormatInt(max((size+chunk-1)/chunk, 1), 10))
	client, _ := load.Client(64, 10*time.Minute) // its connections end with the process
	child, err := setup.StartServe(cmd, addr, client, 20*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return &server{Serve: child, token: token, client: client}, nil
}

// childEnv is this process's environment without fencelab settings, so the
// child gets exactly the bench's.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "FENCELAB_") {
			env = append(env, kv)
		}
	}
	return env
}

// cpu reads the child's user + system CPU time from /proc/<pid>/stat.
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.Cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("read the server's CPU time (Linux /proc only): %w", err)
	}
	// Fields after the command name (which may hold spaces) start at ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat: %q", b)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const tick = 10 * time.Millisecond // USER_HZ = 100 on Linux
	return time.Duration(utime+stime) * tick, nil
}

// memory reads the child's peak and current resident set from /proc.
func (s *server) memory() (hwm, rss int64, err error) {
	if hwm, err = s.StatusKB("VmHWM"); err == nil {
		rss, err = s.StatusKB("VmRSS")
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the server's memory (Linux /proc only): %w", err)
	}
	return hwm << 10, rss << 10, nil
}

// upload sends the chunk files as one session and returns its id, the time
// from the session's creation to the completion's answer, and the
// completion's share of it (finishing the hash, verification, rename).
func (s *server) upload(ctx context.Context, parts []string, size, chunk int64, digest string, parallel int) (id string, took, completing time.Duration, err error) {
	count := len(parts)
	start := time.Now()
	var sess upload.Session
	if err := s.call(ctx, "POST", "/upload/sessions", upload.CreateSessionRequest{
		TotalSize: size, ChunkCount: count, ChunkSize: chunk, SHA256: digest}, http.StatusCreated, &sess); err != nil {
		return "", 0, 0, err
	}
	next := make(chan int)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for n := range next {
				if err := s.putChunk(ctx, sess.ID, n, parts[n]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var sendErr error
feed:
	for n := range count {
		select {
		case next <- n:
		case sendErr = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if sendErr == nil && len(errs) > 0 {
		sendErr = <-errs
	}
	if sendErr != nil {
		return "", 0, 0, sendErr
	}
	sent := time.Now()
	if err := s.call(ctx, "POST", "/upload/sessions/"+sess.ID+"/complete", nil, http.StatusOK, &sess); err != nil {
		return "", 0, 0, err
	}
	took = time.Since(start)
	if sess.State != upload.SessionCompleted {
		return "", 0, 0, fmt.Errorf("session %s is %s after complete", sess.ID, sess.State)
	}
	return sess.ID, took, time.Since(sent), nil
}

// commitAll commits every session as a file named after it.
func (s *server) commitAll(ctx context.Context, sessions []string) error {
	for i, id := range sessions {
		var f upload.File
		if err := s.call(ctx, "POST", "/upload/sessions/"+id+"/commit",
			upload.CommitRequest{Name: fmt.Sprintf("bench-round-%d.bin", i+1)}, http.StatusCreated, &f); err != nil {
			return err
		}
	}
	return nil
}

// awaitPublished waits until processing has published the file of every
// session (a worker runs in the server now) and returns how many there are.
func (s *server) awaitPublished(ctx context.Context, sessions []string) (int, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range sessions {
		var sess upload.Session
		if err := s.call(ctx, "GET", "/upload/sessions/"+id, nil, http.StatusOK, &sess); err != nil {
			return 0, err
		}
		for {
			var f upload.File
			if err := s.call(ctx, "GET", "/upload/files/"+sess.FileID+"/info", nil, http.StatusOK, &f); err != nil {
				return 0, err
			}
			if f.State == upload.FilePublished {
				break
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("file %s of session %s still %s after 2 minutes", f.ID, id, f.State)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(50 * time.Millisecond): // polling for an outcome, not timing one
			}
		}
	}
	return len(sessions), nil
}

// hashedBytes is the server's fencelab_upload_hashed_bytes_total.
type hashedBytes struct{ streamed, reread float64 }

// hashed reads how many bytes the server has fed to running hashes as they
// were written and read back from partial files, from its /metrics.
func (s *server) hashed(ctx context.Context) (hashedBytes, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.Base+"/metrics", nil)
	if err != nil {
		return hashedBytes{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return hashedBytes{}, err
	}
	defer resp.Body.Close()
	var h hashedBytes
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(val, 64)
		switch name {
		case `fencelab_upload_hashed_bytes_total{how="streamed"}`:
			h.streamed = v
		case `fencelab_upload_hashed_bytes_total{how="reread"}`:
			h.reread = v
		}
	}
	return h, sc.Err()
}

// putChunk sends one chunk file: an *os.File body of known length lets
// net/http hand it to sendfile, so the load generator costs the shared CPUs
// about what a client on another machine would cost them: nothing.
func (s *server) putChunk(ctx context.Context, id string, n int, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "PUT", fmt.Sprintf("%s/upload/sessions/%s/chunks/%d", s.Base, id, n), f)
	if err != nil {
		return err
	}
	req.ContentLength = st.Size()
	req.Header.Set("Authorization", "Bearer "+s.token)
	return s.send(req, http.StatusCreated, nil)
}

func (s *server) call(ctx context.Context, method, path string, body any, want int, out any) error {
	var r io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.Base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return s.send(req, want, out)
}

func (s *server) send(req *http.Request, want int, out any) error {
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
