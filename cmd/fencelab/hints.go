package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fencelab/fencelab/core/app"
)

// Errors a newcomer meets first; each says what to do next.

// dataDirEnv is the env file `dev` writes (FENCELAB_DATA_DIR/env).
func dataDirEnv() string {
	return filepath.Join(app.Env("FENCELAB_DATA_DIR", ".fencelab"), "env")
}

var errNoDatabase = fmt.Errorf("DATABASE_URL is not set and there is no %s: "+
	"run `go run ./cmd/fencelab dev` in this directory first (it provisions PostgreSQL and writes that file), "+
	"or set DATABASE_URL (or --database-url)", dataDirEnv())

var errNoSecret = fmt.Errorf("FENCELAB_TOKEN_SECRET is not set and there is no %s: "+
	"run `go run ./cmd/fencelab dev` in this directory once (it generates the dev secret), "+
	"or set FENCELAB_TOKEN_SECRET (or --token-secret) to at least 16 bytes, e.g. $(openssl rand -hex 32)", dataDirEnv())

// connectHint adds "is dev running?" to a failed connection to the dev
// database: its URL comes from the env file, but the cluster runs only
// while `fencelab dev` does.
func connectHint(err error, url string) error {
	if err == nil {
		return nil
	}
	if url != "" && url == readEnvFile(dataDirEnv())["DATABASE_URL"] {
		return fmt.Errorf("%w\n(this is the dev database from %s: is `fencelab dev` running? start it in another terminal)", err, dataDirEnv())
	}
	return err
}

var errMigrateVerb = errors.New("migrate needs a verb: `fencelab migrate up` applies every pending migration; " +
	"`fencelab migrate down [N]` reverts N (default 1); `fencelab migrate version` prints the schema version")
