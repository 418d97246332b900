package points

// The points chapter under every schedule (fencelab lab explore
// points/concurrent-debits): two debits, each a transaction of three
// steps, run in every order PostgreSQL allows.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/points"
)

// guardedDebitStmt is the product's debit statement, guard and all
// (AND balance >= @amount), run by the explored actors inside their own
// transactions so that a step boundary can fall between the debit and its
// commit — where the HTTP handler gives none — and by naiveLostResponse's
// handler, which keeps the guard and drops the recorded reply.
var guardedDebitStmt = pg.MustNamed(points.SQLDebit)

// concurrentDebitsExplore: A and B each read the balance, debit 30 and
// commit, against an opening balance of 40 — room for one debit. Guarded,
// the debit's own WHERE decides on the row it locks (a debit queued behind
// the other's uncommitted one re-checks the committed balance): every
// schedule accepts one and refuses one, PTS-I1 holds. Naive, the decision
// is taken in Go on the balance read: a schedule where both read 40
// before either commits overdraws; a serial one does not.
var concurrentDebitsExplore = &lab.Explore{
	Claim: "two debits of 30 against a balance of 40, each read → debit → commit in its own transaction: under every schedule exactly one is accepted and the balance ends at 10",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("read", "debit", "commit")},
		{Name: "B", Steps: lab.Steps("read", "debit", "commit")},
	},
	Run: exploreConcurrentDebits,
}

func exploreConcurrentDebits(x *lab.X) {
	const (
		opening = 40
		amount  = 30
		account = "acct-0042"
	)
	l := StartLab(x, lab.Options{})
	openAccount(x, l, account, "user-0042", opening)
	stmt := guardedDebitStmt
	if x.Naive {
		_, err := l.Pool.Exec(context.Background(), `ALTER TABLE points_account DROP CONSTRAINT balance_non_negative`)
		require.NoError(x, err)
		x.Step(lab.Step{Actor: "db", Action: "drop CHECK (balance >= 0): the naive schema"})
		stmt = naiveDebitStmt
	}
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		db := a.Pool(l.DBURL)
		a.Step("read")
		tx, err := db.Begin(ctx)
		if err != nil {
			x.Error(a.Name, "begin", err)
			return
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		var balance int64
		if err := tx.QueryRow(ctx, `SELECT balance FROM points_account WHERE id = $1`, account).Scan(&balance); err != nil {
			x.Error(a.Name, "read balance", err)
			return
		}
		a.Say(fmt.Sprintf("read balance %d", balance), "", "")

		a.Step("debit")
		action := fmt.Sprintf("debit %d", amount)
		switch {
		case x.Naive && balance < amount:
			a.Say(action, lab.Refused, fmt.Sprintf("checked in Go: %d < %d", balance, amount))
		default:
			var (
				id, after, version int64
				at                 any
			)
			err := tx.QueryRow(ctx, stmt.SQL, stmt.Args(debitArgs(account, NewKey(), amount))...).Scan(&id, &at, &after, &version)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				a.Say(action, lab.Refused, "the guarded UPDATE matched no row: insufficient balance")
			case err != nil:
				x.Error(a.Name, action, err)
				return
			case after < 0:
				a.Say(action, lab.Violates, fmt.Sprintf("balance %d", after))
			default:
				a.Say(action, lab.Accepted, fmt.Sprintf("balance %d", after))
			}
		}

		a.Step("commit")
		if err := tx.Commit(ctx); err != nil {
			x.Error(a.Name, "commit", err)
			return
		}
		a.Say("commit", "", "")
	})
	balance := reReadBalance(x, l.App, account)
	if !x.Naive {
		require.EqualValues(x, opening-amount, balance, "exactly one debit of 30 fits in 40")
	}
}
