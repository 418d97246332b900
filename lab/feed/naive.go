package feed

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/feed"
)

// naivePageStmt is the product's push page (feed.SQLPagePush, response log
// and all) minus its access re-check: each inbox candidate is joined to
// the post itself instead of the reader's readable posts (AccessCheck),
// and to the reader's relation row whatever its state instead of an
// active follow. Nothing else differs: the page, its order and its
// response log are the product's (FEED-I1 judges that log).
var naivePageStmt = NaivePushPage("FROM social_post p")

// NaivePushPage is the product's push page (feed.SQLPagePush, response
// log and all) with its access re-check swapped for access: the FROM
// clause that picks the posts a reader may see in place of
// social_readable_posts (AccessCheck on the truth table), and the
// reader's relation row joined whatever its state instead of an active
// follow. This chapter's naive feed and the relations chapter's
// view-authorised read are the two naive pages; the response log both
// keep is what FEED-I1 judges, so each is caught by the rows it served.
func NaivePushPage(access string) pg.Named {
	return pg.MustNamed(cutAll(cutAll(feed.SQLPagePush,
		"FROM social_readable_posts(@reader::text) p", access),
		"f.followee = p.author AND f.state = 'active'", "f.followee = p.author"))
}

// cutAll replaces every occurrence of guard, and panics when the product's
// statement no longer has it (the naive version would silently be the
// product).
func cutAll(s, guard, with string) string {
	if !strings.Contains(s, guard) {
		panic("lab/feed: the product's page statement no longer has " + guard)
	}
	return strings.ReplaceAll(s, guard, with)
}

// naiveRead is the reader's next page, first page of the feed, read with
// naivePageStmt as the product's Read runs its statement (the first
// page's position: no cursor, no previous page). It narrates what the
// page served.
func naiveRead(x *lab.X, a *lab.App, reader string, postID int64) {
	served := FirstPage(x, a.Pool, naivePageStmt, reader)
	logged := a.Count(x, `SELECT count(*) FROM social_feed_served WHERE reader = $1 AND post_id = $2`, reader, postID)
	x.Step(lab.Step{Actor: reader, Action: "read the feed (no access re-check)", Outcome: fmt.Sprintf("%d posts served", len(served)),
		Note: fmt.Sprintf("posts %v; post %d logged as served %d times", served, postID, logged)})
	x.Figure("served_naive", len(served))
}

// FirstPage reads reader's first push-feed page (no cursor, no previous
// page) with stmt, a NaivePushPage, as the product's Read runs its
// statement, and returns the posts the page served: the rows of the page
// part ranked within its limit. The statement's response log records
// them as it does the product's.
func FirstPage(x *lab.X, db pg.Querier, stmt pg.Named, reader string) []int64 {
	x.Helper()
	const limit = 20
	args := pgx.NamedArgs{
		"reader": reader, "cursor_at": time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "cursor_id": int64(math.MaxInt64),
		"top_at": time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), "top_id": int64(0), "seen": int64(math.MaxInt64),
		"limit": limit, "strategy": "push",
	}
	rows, err := db.Query(context.Background(), stmt.SQL, stmt.Args(args)...)
	require.NoError(x, err)
	defer rows.Close()
	var served []int64
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(x, err)
		part, _ := vals[0].(int32)
		rank, _ := vals[1].(int64)
		if part == 0 || rank > limit {
			continue
		}
		id, _ := vals[3].(int64)
		served = append(served, id)
	}
	require.NoError(x, rows.Err())
	return served
}
