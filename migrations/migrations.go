// Package migrations embeds the one golang-migrate sequence for the whole
// schema.
//
// golang-migrate's one rule: versions are distinct and increasing, and a
// file is never edited once applied. It runs each version once per
// database, and only versions above the database's current one. So:
//
//   - A new file goes above every landed one, whatever its module, and says
//     its owner in its name: NNNN_<owner>_<what>.up.sql and .down.sql
//     (0605_claim_no_live_index, 0607_report_retention). A change to every
//     module's tables at once says what it changes instead, with each
//     table under its owner's heading in the file
//     (0609_checks_without_counted_repetition). Which tables a module owns
//     is docs/DATA.md's, not a version range's.
//   - A landed file is frozen. manifest.sum holds the sha256 of every
//     landed file (sha256sum's format); TestLandedMigrationsAreUnchanged
//     fails on an edited, removed or unlisted file, TestNoMigrationBelowTheTop
//     on a new file numbered at or below the top. A new file is listed with
//     `go test ./migrations -run TestLandedMigrationsAreUnchanged -update`,
//     which appends it and never rewrites a landed line.
//
// The low numbers (0001 … 0600) are from when each module had a version
// range; files added below the top then were repeated in catch-ups on top
// (0603_catch_up, 0604_catch_up) so that older dev databases converge —
// core/pg TestAnOldDevDatabaseCatchesUp still proves they do. There are
// no ranges and no catch-ups any more.
//
// The manifest baselines the files as they stood when it was written, and
// two of them had been edited after landing: 0320_social_like (its like
// index moved to 0032; the old text is core/pg/testdata/migrations-0600,
// and 0603 converges a database that ran it) and 0607_report_retention
// (its append-only trigger's delete condition changed from one
// fencelab.report_purge gate to one gate per owner, lease_purge and
// report_purge, and its index from lease_report_granted to lease_granted
// and fence_guard_lease). A dev database that ran the first 0607 keeps the
// first trigger and index; no migration repairs that, since the first
// text lived for one commit (c392696, changed by ed5fbf5 the same
// afternoon): recreate such a database (a new --data-dir).
package migrations

import "embed"

// FS holds every *.sql migration, embedded into the binary.
//
//go:embed *.sql
var FS embed.FS
