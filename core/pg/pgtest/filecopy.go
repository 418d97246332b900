package pgtest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/stdlib"
)

// driverName is the database/sql driver pgtestdb connects through: pgx's,
// with one change. pgtestdb clones the migrated template with
//
//	CREATE DATABASE "inst" WITH TEMPLATE "tpl" OWNER "role"
//
// and from PostgreSQL 15 that statement's default strategy, WAL_LOG, reads
// every block of the template through shared buffers and writes it to the
// WAL again. The test servers run with fsync off, so the other strategy,
// FILE_COPY (copy the files, with a checkpoint before and after), costs
// little; measured on this project's template (775 relations, 10 MB) it
// takes 21 ms a clone against WAL_LOG's 57 ms, and cloning was the largest
// single cost of the PostgreSQL work in the suite (a twelfth of its CPU).
// The driver appends STRATEGY FILE_COPY to that one statement on servers
// that know the option; every other statement passes unchanged.
const driverName = "pgx-pgtest"

var registerDriver sync.Once

func fileCopyDriver() string {
	registerDriver.Do(func() { sql.Register(driverName, cloneDriver{stdlib.GetDefaultDriver()}) })
	return driverName
}

type cloneDriver struct{ driver.Driver }

func (d cloneDriver) Open(name string) (driver.Conn, error) {
	c, err := d.Driver.Open(name)
	if err != nil {
		return nil, err
	}
	sc, ok := c.(*stdlib.Conn)
	if !ok {
		return c, nil
	}
	v, _ := strconv.Atoi(sc.Conn().PgConn().ParameterStatus("server_version_num"))
	if v == 0 {
		// server_version_num is reported at start-up from PostgreSQL 17
		// only; server_version ("15.8 (Debian …)") is reported by all.
		major, _, _ := strings.Cut(sc.Conn().PgConn().ParameterStatus("server_version"), ".")
		m, _ := strconv.Atoi(major)
		v = m * 10000
	}
	return &cloneConn{Conn: sc, fileCopy: v >= 150000}, nil
}

// cloneConn is pgx's connection with ExecContext rewriting the clone
// statement; the embedded *stdlib.Conn keeps every other interface
// database/sql looks for (transactions, pings, session resets).
type cloneConn struct {
	*stdlib.Conn
	fileCopy bool
}

func (c *cloneConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.fileCopy && strings.HasPrefix(query, "CREATE DATABASE ") && strings.Contains(query, " WITH TEMPLATE ") &&
		!strings.Contains(query, "STRATEGY") {
		query += " STRATEGY FILE_COPY"
	}
	return c.Conn.ExecContext(ctx, query, args)
}
