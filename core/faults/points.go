package faults

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Point is one named place where a process can be paused (`--pause-at`)
// or failed (tests): its name, who hits it, and what the key is.
type Point struct {
	Name  string
	Where string // the components that hit it and the moment
	Key   string // what the key printed after PAUSED identifies
}

// Points is the catalogue of every fault point in the program, core and
// services alike (core cannot import services, so their names are spelled
// here; TestEveryPointIsCatalogued keeps the two in step). `--pause-at
// list` prints it and `--pause-at NAME` refuses a name not in it.
var Points = []Point{
	{AfterClaim, "claim engine: a job is claimed (fence raised), its handler has not run", "job id"},
	{BeforeWrite, "report (lease chapter): the lease was renewed, the fenced write has not happened", "lease name, report:<date>"},
	{BeforeCommit, "idem: effect written, response not stored; outbox: batch written, not committed; upload: completion/processing before commit", "idempotency key, consumer name, session or job"},
	{AfterCommit, "idem: effect and response committed, answer not sent; outbox: batch committed; shortlink: click batch committed", "idempotency key, consumer name, shortlink_clicks"},
	{AfterBytesWritten, "upload: a completed file is renamed into the blob store, its metadata not committed", "session id"},
	{"upload.chunk_recorded", "upload: a chunk's bytes are durable and its row recorded, the running hash not advanced", "<session id>/<n>"},
	{BeforeUnlink, "upload GC: a blob is marked deleting, its file not unlinked", "sha256"},
	{"idem.before_effect", "idem: the key's record is committed in flight, the effect transaction has not begun", "idempotency key"},
	{"outbox.before_batch", "outbox consumer: holds its lease, no batch transaction open yet", "consumer name"},
	{"notify.after_call", "notify: a channel call returned (or timed out), nothing recorded yet", "delivery key, notify-<id>-<channel>"},
	{"social.rel.locked", "social relations: both rows of a pair locked, nothing written", "actor>other"},
	{"social.rel.before_commit", "social relations: rows and events written, not committed", "actor>other"},
	{"social.like.before_commit", "likes: the fact and its event written, not committed", "item>user"},
	{"social.like.applied", "like counter: a batch added its events, not committed", "social.likes"},
	{"social.like.recounted", "likes recompute: a chunk's counts written, not committed", "last item id of the chunk"},
	{"flashsale.hold.before_commit", "flash sale: a hold is written, not committed", "request key"},
	{"flashsale.hold.after_commit", "flash sale: a hold committed, the answer not sent", "request key"},
	{"flashsale.release.before_commit", "flash sale: a release batch locked and released its holds, not committed", "sku"},
}

// Lookup returns the catalogued point called name.
func Lookup(name string) (Point, bool) {
	for _, p := range Points {
		if p.Name == name {
			return p, true
		}
	}
	return Point{}, false
}

// CheckName refuses a name that no code hits: a typo would otherwise arm
// a point that never pauses and the experiment would silently run through.
func CheckName(name string) error {
	if _, ok := Lookup(name); ok {
		return nil
	}
	names := make([]string, 0, len(Points))
	for _, p := range Points {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return fmt.Errorf("--pause-at: no fault point %q (known: %s; `--pause-at list` describes each)", name, strings.Join(names, ", "))
}

// WriteList prints one line per point: name, where, key.
func WriteList(w io.Writer) {
	width := 0
	for _, p := range Points {
		width = max(width, len(p.Name))
	}
	for _, p := range Points {
		fmt.Fprintf(w, "%-*s  %s (key: %s)\n", width, p.Name, p.Where, p.Key)
	}
}
