package postgres

import (
	"errors"
	"strings"
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

func (dialect) Lock(l sqlstore.Lock, of ...string) string {
	var c string
	switch l {
	case sqlstore.LockShare:
		c = " FOR SHARE"
	case sqlstore.LockNoKeyUpdate:
		c = " FOR NO KEY UPDATE"
	default:
		c = " FOR UPDATE"
	}
	if len(of) > 0 {
		c += " OF " + strings.Join(of, ", ")
	}
	if l == sqlstore.LockUpdateSkipLocked {
		c += " SKIP LOCKED"
	}
	return c
}

func (dialect) Records(param, alias string, cols ...sqlstore.Column) string {
	var b strings.Builder
	b.WriteString("jsonb_to_recordset(" + param + "::jsonb) AS " + alias + "(")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.Name + " " + c.Type)
	}
	b.WriteString(")")
	return b.String()
}

func (dialect) Greatest() string { return "greatest" }
func (dialect) Bytewise() string { return ` COLLATE "C"` }
