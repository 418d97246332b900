package pg

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinels for the driver errors the modules branch on. This file is the
// only place that knows SQLSTATE codes; everything above it uses errors.Is.
var (
	ErrNotFound            = errors.New("pg: no rows")
	ErrUniqueViolation     = errors.New("pg: unique violation")
	ErrCheckViolation      = errors.New("pg: check violation")
	ErrForeignKeyViolation = errors.New("pg: foreign key violation")
	ErrNotNullViolation    = errors.New("pg: not null violation")
	ErrSerialization       = errors.New("pg: serialization failure")
	ErrDeadlock            = errors.New("pg: deadlock detected")
	ErrLockNotAvailable    = errors.New("pg: lock not available")
	ErrQueryCanceled       = errors.New("pg: query canceled")
	ErrRaised              = errors.New("pg: raised by the database")
	// ErrUnavailable: the database could not be reached or went away
	// (connection refused or lost, server shutting down or starting up).
	// Transient by nature; HTTP answers it with 503 and Retry-After.
	ErrUnavailable = errors.New("pg: database unavailable")
)

// ConstraintError keeps the constraint name next to the sentinel so a module
// can tell its unique keys apart (errors.As), while errors.Is still matches
// the sentinel.
type ConstraintError struct {
	Kind       error
	Constraint string
	Table      string
	Err        *pgconn.PgError
}

func (e *ConstraintError) Error() string {
	return fmt.Sprintf("%v: %s on %s: %s", e.Kind, e.Constraint, e.Table, e.Err.Message)
}

func (e *ConstraintError) Is(target error) bool { return target == e.Kind }
func (e *ConstraintError) Unwrap() error        { return e.Err }

var sqlstate = map[string]error{
	"23505": ErrUniqueViolation,
	"23514": ErrCheckViolation,
	"23503": ErrForeignKeyViolation,
	"23502": ErrNotNullViolation,
	"40001": ErrSerialization,
	"40P01": ErrDeadlock,
	"55P03": ErrLockNotAvailable,
	"57014": ErrQueryCanceled,
	"P0001": ErrRaised,
}

// MapError turns driver errors into the sentinels above; any other error is
// returned unchanged. It is idempotent, so callers may map twice.
func MapError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var ce *ConstraintError
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	// A connection that could not be opened, for whatever reason (refused,
	// out of slots: "too many clients already", 53300), is the database
	// being unavailable to us, not a bug in the request.
	var ce2 *pgconn.ConnectError
	if errors.As(err, &ce2) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if kind, ok := sqlstate[pe.Code]; ok {
			return &ConstraintError{Kind: kind, Constraint: pe.ConstraintName, Table: pe.TableName, Err: pe}
		}
		// 25006 (read-only transaction): a write reached a node that is
		// no longer the primary — a failover in progress, not a bug.
		if unavailableState(pe.Code) || pe.Code == "25006" {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	// The connection went away under a statement (an immediate stop, a
	// killed backend, a cut network): the driver reports the socket's end
	// (EOF, reset, broken pipe) or, on the next use, "conn closed". Whether
	// a COMMIT in flight took effect is unknown, so this must never be
	// answered as a plain failure (500): it is a 503 — "retry, with your
	// idempotency key".
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// unavailableState reports the SQLSTATEs that mean "the database cannot
// serve us right now": class 08 (connection exception), class 53
// (insufficient resources — 53300 too_many_connections above all), the
// shutdown and start-up codes of class 57P, and a session the server ended
// for idleness (25P03, 57P05).
func unavailableState(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "57P05", "25P03":
		return true
	}
	return false
}

// Constraint returns the violated constraint's name, or "" when err is not a
// constraint violation.
func Constraint(err error) string {
	var ce *ConstraintError
	if errors.As(MapError(err), &ce) {
		return ce.Constraint
	}
	return ""
}

// Refused reports whether err is a statement's deliberate refusal carrying
// marker. Plain SQL has no RAISE; a statement that must fail its
// transaction — and with it the COMMIT pipelined behind it (PipeTx) —
// when it matches no row casts a text that starts with marker to int:
//
//	SELECT CASE n WHEN 1 THEN n ELSE ('marker: ' || n)::int END FROM (SELECT count(*)::int AS n FROM …) f
//
// which fails with 22P02 and the text in the message. The text must depend
// on the row (n), never be a constant: the planner folds constants ahead of
// the CASE and would raise every time.
func Refused(err error, marker string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22P02" && strings.Contains(pe.Message, `"`+marker)
}
