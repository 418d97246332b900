package upload

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// fOFDSetlk is F_OFD_SETLK from <fcntl.h> (the same on every Linux
// architecture); package syscall does not name it.
const fOFDSetlk = 37

// lockRange takes an open-file-description lock on [off, off+n) of f. Unlike
// classic POSIX record locks, OFD locks belong to the open file, not the
// process: two opens in one process exclude each other just as two
// processes do, and the kernel drops the lock when the file is closed or
// the process dies — a crashed writer never leaves its chunk locked.
func lockRange(f *os.File, off, n int64) (func(), error) {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: off, Len: max(n, 1)}
	if err := fcntlLock(f, &lk); err != nil {
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
			return nil, errRangeBusy
		}
		return nil, &os.PathError{Op: "lock", Path: f.Name(), Err: err}
	}
	return func() {
		un := lk
		un.Type = syscall.F_UNLCK
		_ = fcntlLock(f, &un) // closing the file releases it too
	}, nil
}

func fcntlLock(f *os.File, lk *syscall.Flock_t) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lerr = syscall.FcntlFlock(fd, fOFDSetlk, lk)
			if !errors.Is(lerr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return lerr
}

// fallocKeepSize is FALLOC_FL_KEEP_SIZE from <linux/falloc.h>.
const fallocKeepSize = 0x1

// allocate reserves [off, off+n) of f's blocks without changing its size
// (fallocate with FALLOC_FL_KEEP_SIZE). A chunk written into reserved
// blocks skips the file system's per-block delayed-allocation bookkeeping
// on every page it writes (about a third of the kernel's cost of the
// write on ext4), and each chunk's blocks are contiguous whatever order
// the chunks arrive in. File systems without fallocate are left alone.
func allocate(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Fallocate(int(fd), fallocKeepSize, off, n)
			if !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if errors.Is(ferr, syscall.EOPNOTSUPP) || errors.Is(ferr, syscall.ENOSYS) {
		return nil
	}
	if ferr != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
	}
	return nil
}
