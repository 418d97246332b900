package pg_test

import "github.com/fencelab/fencelab/migrations"

var migrationsFS = migrations.FS
