// Package migrations embeds the one golang-migrate sequence for the whole
// schema. Version ranges are reserved per module so modules can grow in
// parallel: 0001 base, 0010 lease, 0020 claim, 0030 idem+outbox,
// 0100 points, 0200 flashsale reservations, 0210 flashsale orders,
// 0300 social rel, 0310 feed, 0320 like, 0400 notify, 0500 shortlink,
// 0600 upload. A table's indexes live in its owner's range (docs/DATA.md):
// 0032 holds outbox_event's per-topic indexes. golang-migrate applies only
// versions above a database's current one, so a file added below it must be
// a no-op where the schema already has its effect, and its statements are
// repeated in a new top catch-up file (0603_catch_up, 0604_catch_up) so that a database
// already past it converges (core/pg TestAnOldDevDatabaseCatchesUp).
// Since 0604 every new file goes on top whatever its module, and says its
// owner in its name: 0605_claim_no_live_index, 0607_report_retention,
// 0608_claim_fillfactor. A change to every module's tables at once says
// what it changes instead, with each table under its owner's heading in
// the file: 0609_checks_without_counted_repetition.
package migrations

import "embed"

// FS holds every *.sql migration, embedded into the binary.
//
//go:embed *.sql
var FS embed.FS
