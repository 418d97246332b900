package main

import (
	"errors"
	"os"

	"github.com/fencelab/fencelab/core/faults"
)

// errListed ends a command that only printed something (`--pause-at list`).
var errListed = errors.New("listed")

// pauseSet arms each --pause-at name to print PAUSED and wait for a line on
// stdin. `--pause-at list` prints the catalogue instead; an unknown name is
// refused rather than armed where nothing will ever hit it.
func pauseSet(names []string, lines *faults.Lines) (*faults.Set, error) {
	if len(names) == 0 {
		return nil, nil
	}
	for _, n := range names {
		if n == "list" {
			faults.WriteList(os.Stdout)
			return nil, errListed
		}
		if err := faults.CheckName(n); err != nil {
			return nil, err
		}
	}
	set := faults.New()
	for _, n := range names {
		set.PauseOnLines(n, lines, os.Stdout)
	}
	return set, nil
}

const pauseAtHelp = "fault point to pause at: print PAUSED <point> <key> and wait for a line on stdin (repeatable; `list` prints every point)"
