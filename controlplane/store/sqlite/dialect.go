package sqlite

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
)

// dialect is SQLite's sqlstore.Dialect.
type dialect struct{}

var _ sqlstore.Dialect = dialect{}

func (dialect) Name() string { return "sqlite" }

// Translate maps UNIQUE / PRIMARY KEY violations to
// *store.AlreadyExistsError naming the field after the violated columns
// (alreadyExists), and FOREIGN KEY violations to store.ErrNotFound.
func (dialect) Translate(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		msg := se.Error()
		if i := strings.LastIndex(msg, "constraint failed: "); i >= 0 {
			cols := msg[i+len("constraint failed: "):]
			if j := strings.LastIndex(cols, " ("); j >= 0 {
				cols = cols[:j]
			}
			if what, ok := alreadyExists[cols]; ok {
				return &store.AlreadyExistsError{What: what}
			}
		}
		return &store.AlreadyExistsError{What: "object"}
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return store.ErrNotFound
	}
	return nil
}

func (dialect) Time(t time.Time) any { return toMS(t) }

func (dialect) NullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return toMS(t)
}

func (dialect) Int32s(v []int32) any   { return encodeList(v) }
func (dialect) Strings(v []string) any { return encodeList(v) }

func (dialect) In(expr, param string) string {
	return expr + " IN (SELECT value FROM json_each(" + param + "))"
}

// Lock is empty: a write transaction holds the database's write lock from
// BEGIN IMMEDIATE to its end, which serialises more than any row lock.
func (dialect) Lock(sqlstore.Lock, ...string) string { return "" }

func (dialect) Records(param, alias string, cols ...sqlstore.Column) string {
	var b strings.Builder
	b.WriteString("(SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("json_extract(value, '$." + c.Name + "') AS " + c.Name)
	}
	b.WriteString(" FROM json_each(" + param + ")) AS " + alias)
	return b.String()
}

func (dialect) Cast(expr, _ string) string { return expr }

func (dialect) Greatest() string { return "max" }
func (dialect) Bytewise() string { return "" }

// alreadyExists maps the column list of a SQLite UNIQUE / PRIMARY KEY
// violation to the field named in *store.AlreadyExistsError.
var alreadyExists = map[string]string{
	"tenants.id":                    "tenant id",
	"tenants.name":                  "tenant name",
	"tenants.email":                 "email",
	"api_keys.id":                   "api key id",
	"signing_keys.kid":              "signing key id",
	"topics.id":                     "topic id",
	"topics.tenant_id, topics.name": "topic name",
	"partitions.topic_id, partitions.partition": "partition",
	"alerts.id":                       "alert id",
	"alerts.id, alerts.tenant_id":     "alert id",
	"webhooks.id":                     "webhook id",
	"webhooks.id, webhooks.tenant_id": "webhook id",
	"webhook_deliveries.id":           "delivery id",
}

// toMS stores a time as unix milliseconds.
func toMS(t time.Time) int64 { return t.UnixMilli() }

// encodeList stores a list as JSON text; nil is "[]".
func encodeList[T any](v []T) string {
	if len(v) == 0 {
		return "[]"
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // []int32 and []string always marshal
	}
	return string(b)
}
