package pg

import (
	"context"
	"regexp"

	"github.com/jackc/pgx/v5"
)

// Named is a statement written with @name parameters (pgx.NamedArgs
// style) and rewritten to $1, $2 … once, when the program starts. Passing
// pgx.NamedArgs rewrites the statement on every call — lexing it and
// allocating a few dozen objects per call — which a statement on a
// request's hot path should not pay for; its call sites stay just as
// readable:
//
//	var debit = pg.MustNamed(`UPDATE … WHERE id = @account AND balance >= @amount`)
//	tx.QueryRow(ctx, debit.SQL, debit.Args(pgx.NamedArgs{"account": id, "amount": n})...)
type Named struct {
	SQL   string   // the statement with $n placeholders
	names []string // names[i] is the name of $(i+1)
}

var paramRE = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

// MustNamed rewrites sql with pgx's own rewriter, so placeholders are found
// exactly where pgx.NamedArgs would find them (not in string literals,
// quoted identifiers or comments).
func MustNamed(sql string) Named {
	self := pgx.NamedArgs{}
	for _, m := range paramRE.FindAllStringSubmatch(sql, -1) {
		self[m[1]] = m[1]
	}
	positional, order, err := self.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		panic("pg: " + err.Error())
	}
	n := Named{SQL: positional, names: make([]string, len(order))}
	for i, name := range order {
		n.names[i] = name.(string)
	}
	return n
}

// Args returns the values of args in the statement's parameter order; a
// name args lacks is NULL, as with pgx.NamedArgs.
func (n Named) Args(args pgx.NamedArgs) []any {
	out := make([]any, len(n.names))
	for i, name := range n.names {
		out[i] = args[name]
	}
	return out
}
