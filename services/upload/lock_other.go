//go:build !linux

package upload

import (
	"fmt"
	"os"
	"sync"
)

// held are the ranges locked by this process. Without Linux's OFD locks the
// exclusion covers one process only: run one writer process per store.
var held sync.Map

func lockRange(f *os.File, off, n int64) (func(), error) {
	key := fmt.Sprintf("%s:%d:%d", f.Name(), off, n)
	if _, busy := held.LoadOrStore(key, true); busy {
		return nil, ErrRangeBusy
	}
	return func() { held.Delete(key) }, nil
}

// allocate does nothing where fallocate is not at hand.
func allocate(*os.File, int64, int64) error { return nil }
