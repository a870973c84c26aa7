package postgres

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// ts is a time as stored: truncated to the millisecond (the precision both
// drivers share).
func ts(t time.Time) time.Time { return t.Truncate(time.Millisecond) }

// nullTS stores the zero time as NULL.
func nullTS(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: ts(t), Valid: true}
}

// fromNullTS reads NULL back as the zero time, and any time in UTC.
func fromNullTS(v pgtype.Timestamptz) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return v.Time.UTC()
}

// orNow returns t, or now when t is zero.
func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// nonNilList stores nil as an empty array (the columns are NOT NULL; pgx
// encodes a nil slice as NULL).
func nonNilList[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// collect scans all rows with scan.
func collect[T any](rows pgx.Rows, scan func(pgx.Row) (T, error), op string) ([]T, error) {
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
