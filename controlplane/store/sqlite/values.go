package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
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

// decodeList reads a JSON list; an empty list is nil.
func decodeList[T any](s string) ([]T, error) {
	var v []T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("decode list %q: %w", s, err)
	}
	if len(v) == 0 {
		return nil, nil
	}
	return v, nil
}

// nonNil stores nil bytes as an empty blob (the columns are NOT NULL).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
