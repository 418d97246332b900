package upload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/fencelab/fencelab/services/upload"
)

// The floor: what any server must spend on an upload it verifies and
// makes durable, and nothing else. The same bytes arrive over a loopback
// TCP connection (sent with sendfile by another goroutine, as the bench's
// client sends its chunks), and one goroutine locked to one OS thread
// reads them in the server's unit (256 KiB), writes them into a partial
// file of the server's own blob store (upload.LocalStore: fallocate per
// chunk, positioned writes, one fsync per chunk) and feeds them to one
// SHA-256 — no HTTP, no database, no scheduling elsewhere. Its CPU is that
// thread's user + system time (getrusage RUSAGE_THREAD), per GiB: the
// socket reads, page-cache writes and fsyncs done on its behalf count, as
// they do for the server. The server's cpu_s_per_gib can only be above it.

// floorBuf is the server's streaming unit (services/upload bufSize).
const floorBuf = 256 << 10

// rusageThread is Linux's RUSAGE_THREAD (the syscall package does not name
// it): the calling thread's CPU only.
const rusageThread = 1

func threadCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, fmt.Errorf("getrusage(RUSAGE_THREAD) (Linux only): %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// floorOnce receives, hashes and stores source once as described above,
// in chunks of chunk bytes under dir, and returns the receiving thread's
// CPU time and the digest it computed.
func floorOnce(ctx context.Context, source, dir string, size, chunk int64) (time.Duration, []byte, error) {
	store, err := upload.NewLocalStore(dir)
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	defer ln.Close()
	sent := make(chan error, 1)
	go func() { sent <- sendFile(ctx, ln.Addr().String(), source) }()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	conn, err := ln.Accept()
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	id := uuid.NewString()
	part, err := store.OpenPartial(ctx, id, true)
	if err != nil {
		return 0, nil, err
	}
	defer part.Close()
	buf := make([]byte, floorBuf)
	h := sha256.New()
	cpu0, err := threadCPU()
	if err != nil {
		return 0, nil, err
	}
	for off := int64(0); off < size; off += chunk {
		n := min(chunk, size-off)
		if err := part.Allocate(off, n); err != nil {
			return 0, nil, err
		}
		for pos := int64(0); pos < n; {
			m, err := io.ReadFull(conn, buf[:min(int64(len(buf)), n-pos)])
			if err != nil {
				return 0, nil, fmt.Errorf("floor: receive: %w", err)
			}
			if _, err := part.WriteAt(buf[:m], off+pos); err != nil {
				return 0, nil, err
			}
			h.Write(buf[:m])
			pos += int64(m)
		}
		if err := part.Sync(); err != nil {
			return 0, nil, err
		}
	}
	sum := h.Sum(nil)
	cpu1, err := threadCPU()
	if err != nil {
		return 0, nil, err
	}
	if err := <-sent; err != nil {
		return 0, nil, fmt.Errorf("floor: send: %w", err)
	}
	return cpu1 - cpu0, sum, nil
}

// sendFile sends the file over a new connection to addr; io.Copy from an
// *os.File to a *net.TCPConn is sendfile.
func sendFile(ctx context.Context, addr, path string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		c.Close()
		return err
	}
	defer f.Close()
	_, err = io.Copy(c, f)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
