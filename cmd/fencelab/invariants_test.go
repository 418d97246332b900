package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/program"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// dropGuards removes every guard the schema has — CHECK, UNIQUE, PRIMARY
// KEY and EXCLUDE constraints (with the foreign keys that lean on them),
// unique indexes, user triggers — leaving the tables and no row in them.
const dropGuards = `
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.conrelid::regclass AS tbl, c.conname
             FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
            WHERE n.nspname = current_schema() AND c.contype IN ('c', 'u', 'p', 'x') AND c.conrelid <> 0
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I CASCADE', r.tbl, r.conname);
  END LOOP;
  FOR r IN SELECT i.indexrelid::regclass AS idx
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND i.indisunique
  LOOP
    EXECUTE format('DROP INDEX IF EXISTS %s', r.idx);
  END LOOP;
  FOR r IN SELECT t.tgrelid::regclass AS tbl, t.tgname
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND NOT t.tgisinternal
  LOOP
    EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tbl);
  END LOOP;
END $$`

// "This guard is missing from the schema" and "this balance is negative"
// are different facts: on a migrated database stripped of every guard and
// holding no data, every data invariant holds (there is no row to report)
// and every schema invariant reports the guards it checks.
func TestNoDataInvariantReportsSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	reg := program.Invariants()

	var schema int
	for _, r := range reg.Run(ctx, db) {
		if r.Schema {
			schema++
		}
		if !r.Holds() {
			t.Errorf("on a freshly migrated database %s should hold:\n%s", r.ID, format(r))
		}
	}
	if schema < 7 {
		t.Fatalf("%d schema invariants registered; every module with guards in its schema has one", schema)
	}
	if t.Failed() {
		t.FailNow()
	}

	if _, err := db.Exec(ctx, dropGuards); err != nil {
		t.Fatalf("drop the guards: %v", err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_constraint WHERE contype IN ('c', 'u', 'p', 'x') AND connamespace = current_schema()::regnamespace)
	                                 + (SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	                                     WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal)`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("guards left after dropping them all: %d (%v)", left, err)
	}
	results := reg.Run(ctx, db)
	t.Logf("%d invariants checked on the stripped schema, %d of them schema invariants", len(results), schema)
	for _, r := range results {
		switch {
		case r.Err != nil:
			t.Errorf("%s failed to run on the stripped schema: %v", r.ID, r.Err)
		case r.Schema && r.Holds():
			t.Errorf("schema invariant %s reports nothing on a schema without its guards", r.ID)
		case !r.Schema && !r.Holds():
			t.Errorf("data invariant %s reports rows on a database without data — a schema finding in a data invariant:\n%s", r.ID, format(r))
		}
	}
}

func format(r invariant.Result) string {
	var sb strings.Builder
	invariant.Format(&sb, r)
	return sb.String()
}
