// Package upload is `fencelab bench upload`: one file sent over HTTP in
// chunks to a real `fencelab serve` process — create the session, PUT every
// chunk (several at a time), complete (which hashes the whole file and
// verifies it against the declaration, then renames it into the blob
// store) — timed from the first request to the completion's answer. The
// ceiling is dd writing the same bytes to the same directory with
// conv=fsync, in the same run; rounds alternate the two so drift on a
// shared machine hits both alike.
//
// The server is a child process, so its peak RSS (VmHWM from /proc) is its
// own and not the load generator's.
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
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
	"github.com/fencelab/fencelab/services/upload"
)

// Run is the command's entry point.
// Bench is `fencelab bench upload`.
var Bench = app.Bench{Name: "upload", Summary: "chunked upload of a large file against dd on the same disk", Run: Run}

// Run runs the benchmark against a child `fencelab serve` (the real binary).
func Run(_ []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench upload", flag.ContinueOnError)
	sizeFlag := fs.String("size", "256MiB", "file size")
	chunkFlag := fs.String("chunk", "8MiB", "chunk size")
	parallel := fs.Int("parallel", 4, "chunk PUTs in flight at once")
	rounds := fs.Int("rounds", 3, "rounds (each: dd, then the upload); medians are reported")
	dir := fs.String("dir", filepath.Join(app.Env("FENCELAB_DATA_DIR", ".fencelab"), "bench-upload"),
		"working directory: source file, dd's output and the server's blob store (one disk); removed afterwards")
	dbURL := fs.String("database-url", "", "PostgreSQL to use, only when given (never DATABASE_URL: the dev database stays untouched); default: a fresh local cluster, fsync on, removed afterwards")
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
	if size < 1 || chunk < 1 || *parallel < 1 || *rounds < 1 {
		return errors.New("size, chunk, parallel and rounds must be positive")
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

	srv, err := pgserver.Provision(ctx, *dbURL, pgserver.Options{}) // durable defaults: never Ephemeral
	if err != nil {
		return err
	}
	defer srv.Close()
	url := srv.URL("")
	if err := (pg.Migrator{FS: migrations.FS, URL: url}).Up(); err != nil {
		return err
	}
	fsync, err := showFsync(ctx, url)
	if err != nil {
		return err
	}

	source := filepath.Join(work, "source.bin")
	digest, err := writeSource(source, size)
	if err != nil {
		return err
	}
	parts, err := splitSource(source, filepath.Join(work, "chunks"), size, chunk)
	if err != nil {
		return err
	}
	s, err := startServer(ctx, url, work, size, chunk)
	if err != nil {
		return err
	}
	defer s.stop()

	count := (size + chunk - 1) / chunk
	fmt.Printf("fencelab bench upload — %s in %d chunks of %s, %d PUTs in flight; %s PostgreSQL (fsync=%s);\n",
		upload.FormatSize(size), count, upload.FormatSize(chunk), *parallel, srv.Strategy, fsync)
	fmt.Printf("server: `fencelab serve` child process (pid %d, workers off), load generator in this process, one %d-core machine shared with other work\n",
		s.cmd.Process.Pid, runtime.NumCPU())
	fmt.Printf("ceiling: dd if=source of=%s bs=%s conv=fsync (the same bytes, the same directory); MB = 10^6 bytes\n\n",
		filepath.Join(work, "dd.out"), upload.FormatSize(chunk))

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tdd MB/s\tupload MB/s\tof ceiling\tupload time\tof which complete\tserver CPU\t")
	var dds, ups, ratios []float64
	for i := range *rounds {
		ddRate, err := ddOnce(source, filepath.Join(work, "dd.out"), chunk, size)
		if err != nil {
			return err
		}
		cpu0, err := s.cpu()
		if err != nil {
			return err
		}
		took, completing, err := s.upload(ctx, parts, size, chunk, digest, *parallel)
		if err != nil {
			return err
		}
		cpu1, err := s.cpu()
		if err != nil {
			return err
		}
		upRate := float64(size) / took.Seconds() / 1e6
		dds, ups, ratios = append(dds, ddRate), append(ups, upRate), append(ratios, upRate/ddRate)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%v\t%v\t%v\t\n", i+1, ddRate, upRate, upRate/ddRate,
			took.Round(time.Millisecond), completing.Round(time.Millisecond), (cpu1 - cpu0).Round(10*time.Millisecond))
	}
	fmt.Fprintf(tw, "median\t%.0f\t%.0f\t%.2f\t\t\t\t\n", median(dds), median(ups), median(ratios))
	tw.Flush()
	hwm, rss, err := s.memory()
	if err != nil {
		return err
	}
	fmt.Printf("\nserver peak RSS (VmHWM, whole run, start-up included): %s; RSS now: %s\n", upload.FormatSize(hwm), upload.FormatSize(rss))
	fmt.Println()
	load.Result("upload", "size", upload.FormatSize(size), "chunk", upload.FormatSize(chunk), "parallel", *parallel,
		"rounds", *rounds, "dd_mb_per_sec", fmt.Sprintf("%.0f", median(dds)), "upload_mb_per_sec", fmt.Sprintf("%.0f", median(ups)),
		"of_ceiling", median(ratios), "peak_rss", upload.FormatSize(hwm))
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
// no layer can cheat) and returns their SHA-256. The file stays in the page
// cache: both dd and the upload read it from memory.
func writeSource(path string, size int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return "", err
	}
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if _, err := io.CopyN(w, mrand.NewChaCha8(seed), size); err != nil {
		return "", err
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
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
	cmd    *exec.Cmd
	base   string
	token  string
	client *http.Client
	stderr *bytes.Buffer
}

func startServer(ctx context.Context, dbURL, work string, size, chunk int64) (*server, error) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.CommandContext(ctx, exe, "serve")
	cmd.Env = append(childEnv(), "DATABASE_URL="+dbURL, "FENCELAB_TOKEN_SECRET="+hex.EncodeToString(secret),
		"FENCELAB_ADDR="+addr, "FENCELAB_WORKERS=0", "FENCELAB_ACCESS_LOG=false", "FENCELAB_LOG_LEVEL=warn",
		"FENCELAB_DATA_DIR="+filepath.Join(work, "server"),
		upload.EnvMaxFileSize+"="+strconv.FormatInt(max(size, 1<<20), 10),
		upload.EnvMaxChunkSize+"="+strconv.FormatInt(max(chunk, 1<<20), 10),
		upload.EnvMaxChunks+"="+strconv.FormatInt(max((size+chunk-1)/chunk, 1), 10))
	client, _ := load.Client(64, 10*time.Minute) // its connections end with the process
	s := &server{cmd: cmd, base: "http://" + addr, token: token, stderr: &bytes.Buffer{}, client: client}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := s.client.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("serve did not become ready: %s", s.stderr.String())
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

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// cpu reads the child's user + system CPU time from /proc/<pid>/stat.
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read the server's memory (Linux /proc only): %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmHWM":
			hwm = n << 10
		case "VmRSS":
			rss = n << 10
		}
	}
	return hwm, rss, nil
}

// upload sends the source file as one session and returns the time from
// the session's creation to the completion's answer, and the completion's
// share of it (hashing, verification, rename).
func (s *server) upload(ctx context.Context, parts []string, size, chunk int64, digest string, parallel int) (took, completing time.Duration, err error) {
	count := len(parts)
	start := time.Now()
	var sess upload.Session
	if err := s.call(ctx, "POST", "/upload/sessions", upload.CreateSessionRequest{
		TotalSize: size, ChunkCount: count, ChunkSize: chunk, SHA256: digest}, http.StatusCreated, &sess); err != nil {
		return 0, 0, err
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
		return 0, 0, sendErr
	}
	sent := time.Now()
	if err := s.call(ctx, "POST", "/upload/sessions/"+sess.ID+"/complete", nil, http.StatusOK, &sess); err != nil {
		return 0, 0, err
	}
	took = time.Since(start)
	if sess.State != upload.SessionCompleted {
		return 0, 0, fmt.Errorf("session %s is %s after complete", sess.ID, sess.State)
	}
	return took, time.Since(sent), nil
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
	req, err := http.NewRequestWithContext(ctx, "PUT", fmt.Sprintf("%s/upload/sessions/%s/chunks/%d", s.base, id, n), f)
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
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, r)
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

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
