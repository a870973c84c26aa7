package sqlite

import (
	"database/sql"
	"encoding/json"
	"time"
)

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// toMS stores a time as unix milliseconds.
func toMS(t time.Time) int64 { return t.UnixMilli() }

// fromMS reads unix milliseconds back in UTC.
func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// nullMS stores the zero time as NULL.
func nullMS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

// fromNullMS reads NULL back as the zero time.
func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMS(v.Int64)
}

// orNow returns t, or now when t is zero.
func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

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

// collect scans all rows with scan.
func collect[T any](rows *sql.Rows, scan func(rowScanner) (T, error), op string) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, translate(op, err)
		}
		out = append(out, v)
	}
	return out, translate(op, rows.Err())
}
