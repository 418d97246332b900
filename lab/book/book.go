// Package book is the one list of the book's experiments, chapter by
// chapter in reading order. `fencelab lab list|run`, the console and the
// docs read it; a module knows nothing of its experiments, so the product
// never imports the lab.
package book

import (
	"slices"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/claim"
	"github.com/fencelab/fencelab/lab/failover"
	"github.com/fencelab/fencelab/lab/feed"
	"github.com/fencelab/fencelab/lab/idem"
	"github.com/fencelab/fencelab/lab/lease"
	"github.com/fencelab/fencelab/lab/likes"
	"github.com/fencelab/fencelab/lab/notify"
	"github.com/fencelab/fencelab/lab/orders"
	"github.com/fencelab/fencelab/lab/outbox"
	"github.com/fencelab/fencelab/lab/points"
	"github.com/fencelab/fencelab/lab/relations"
	"github.com/fencelab/fencelab/lab/reservations"
	"github.com/fencelab/fencelab/lab/shortlink"
	"github.com/fencelab/fencelab/lab/upload"
)

// Experiments is every experiment in the book's order: chapter by chapter,
// each chapter's own order kept.
func Experiments() []lab.Experiment {
	return slices.Concat(
		lease.Experiments,        // 1 lease
		claim.Experiments,        // 2 claim
		idem.Experiments,         // 3 idem
		outbox.Experiments,       // 4 outbox
		points.Experiments,       // 5 points
		reservations.Experiments, // 6 reservations
		orders.Experiments,       // 7 orders
		relations.Experiments,    // 8 relations
		feed.Experiments,         // 9 feed
		likes.Experiments,        // 10 likes
		notify.Experiments,       // 11 notify
		shortlink.Experiments,    // 12 shortlink
		upload.Experiments,       // 13 upload
		failover.Experiments,     // 14 failover
	)
}
