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
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if kind, ok := sqlstate[pe.Code]; ok {
			return &ConstraintError{Kind: kind, Constraint: pe.ConstraintName, Table: pe.TableName, Err: pe}
		}
		// Class 08 (connection exception), the shutdown/start-up codes, and
		// 25006 (read-only transaction): a write reached a node that is
		// no longer the primary — a failover in progress, not a bug.
		if strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "25006" {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	var ce2 *pgconn.ConnectError
	var ne net.Error
	// ErrConnClosed: the pool handed out a connection the server (or a
	// proxy cutting the old primary's sessions) had just closed.
	if errors.As(err, &ce2) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		if !errors.Is(err, ErrUnavailable) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return err
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
