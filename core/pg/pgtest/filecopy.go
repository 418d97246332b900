package pgtest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencelab/fencelab/core/pg"
)

// driverName is the database/sql driver pgtestdb connects through: pgx's,
// with one change. pgtestdb clones the migrated template with
//
//	CREATE DATABASE "inst" WITH TEMPLATE "tpl" OWNER "role"
//
// hard-wired, and cloning was the largest single cost of the PostgreSQL
// work in the suite (a twelfth of its CPU) under PostgreSQL 15's default
// strategy. The driver appends pg.CloneStrategy to that one statement;
// every other statement passes unchanged.
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
	// server_version ("15.8 (Debian 15.8-1)") is reported at start-up.
	major, _, _ := strings.Cut(sc.Conn().PgConn().ParameterStatus("server_version"), ".")
	v, _ := strconv.Atoi(major)
	return &cloneConn{Conn: sc, strategy: pg.CloneStrategy(v * 10000)}, nil
}

// cloneConn is pgx's connection with ExecContext rewriting the clone
// statement; the embedded *stdlib.Conn keeps every other interface
// database/sql looks for (transactions, pings, session resets).
type cloneConn struct {
	*stdlib.Conn
	strategy string // pg.CloneStrategy of the server
}

func (c *cloneConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.strategy != "" && strings.HasPrefix(query, "CREATE DATABASE ") && strings.Contains(query, " WITH TEMPLATE ") &&
		!strings.Contains(query, "STRATEGY") {
		query += c.strategy
	}
	return c.Conn.ExecContext(ctx, query, args)
}
