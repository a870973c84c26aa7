package postgres

import (
	"errors"
	"strconv"
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

// Int32s and Strings encode a list as an array literal ("{1,2}",
// `{"a","b"}`): pgx sends a string parameter as text, which the server
// parses as whatever array type the statement needs (integer[], text[],
// uuid[]); a []string for a uuid[] parameter would have pgx try, and fail
// with a formatted error, another encoding of every element first.
func (dialect) Int32s(v []int32) any {
	b := []byte{'{'}
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return string(append(b, '}'))
}

func (dialect) Strings(v []string) any {
	var b strings.Builder
	b.WriteByte('{')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(x); j++ {
			if x[j] == '"' || x[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(x[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func (dialect) In(expr, param string) string { return expr + " = ANY (" + param + ")" }

func (dialect) Lock(l sqlstore.Lock, of ...string) string {
	var c string
	switch l {
	case sqlstore.LockShare:
		c = " FOR SHARE"
	case sqlstore.LockNoKeyUpdate:
		c = " FOR NO KEY UPDATE"
	case sqlstore.LockKeyShare:
		c = " FOR KEY SHARE"
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

func (dialect) Cast(expr, pgType string) string { return "CAST(" + expr + " AS " + pgType + ")" }

func (dialect) Greatest() string { return "greatest" }
func (dialect) Bytewise() string { return ` COLLATE "C"` }

// alreadyExists maps unique constraints (named in migrations/) to the field
// named in *store.AlreadyExistsError.
var alreadyExists = map[string]string{
	"tenants_pkey":              "tenant id",
	"tenants_name_key":          "tenant name",
	"tenants_email_key":         "email",
	"api_keys_pkey":             "api key id",
	"signing_keys_pkey":         "signing key id",
	"topics_pkey":               "topic id",
	"topics_tenant_id_name_key": "topic name",
	"partitions_pkey":           "partition",
	"alerts_pkey":               "alert id",
	"webhooks_pkey":             "webhook id",
	"webhook_deliveries_pkey":   "delivery id",
}

// ts is a time as stored: truncated to the millisecond (the precision both
// engines share).
func ts(t time.Time) time.Time { return t.Truncate(time.Millisecond) }
