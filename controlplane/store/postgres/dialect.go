package postgres

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
)

// dialect is PostgreSQL's sqlstore.Dialect.
type dialect struct{}

var _ sqlstore.Dialect = dialect{}

func (dialect) Name() string { return "postgres" }

// Translate maps unique_violation (23505) to *store.AlreadyExistsError
// naming the field after the constraint (alreadyExists), and
// foreign_key_violation (23503) to store.ErrNotFound.
func (dialect) Translate(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch pgErr.Code {
	case "23505": // unique_violation
		if what, ok := alreadyExists[pgErr.ConstraintName]; ok {
			return &store.AlreadyExistsError{What: what}
		}
		return &store.AlreadyExistsError{What: pgErr.ConstraintName}
	case "23503": // foreign_key_violation
		return store.ErrNotFound
	}
	return nil
}

func (dialect) Time(t time.Time) any { return ts(t) }

func (dialect) NullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ts(t)
}

// Int32s and Strings pass slices through: pgx (behind database/sql, whose
// value checks it takes over) encodes them as arrays.
func (dialect) Int32s(v []int32) any   { return nonNilList(v) }
func (dialect) Strings(v []string) any { return nonNilList(v) }

func (dialect) In(expr, param string) string { return expr + " = ANY (" + param + ")" }

func (dialect) Lock(l sqlstore.Lock) string {
	switch l {
	case sqlstore.LockShare:
		return " FOR SHARE"
	case sqlstore.LockNoKeyUpdate:
		return " FOR NO KEY UPDATE"
	case sqlstore.LockUpdateSkipLocked:
		return " FOR UPDATE SKIP LOCKED"
	default:
		return " FOR UPDATE"
	}
}

func (dialect) Greatest() string { return "greatest" }
func (dialect) Bytewise() string { return ` COLLATE "C"` }
