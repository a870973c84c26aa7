package sqlstore

import "time"

// Store is the control-plane store's methods written once, over a DB. The
// drivers embed it (postgres.Store, sqlite.Store), so its methods are
// theirs; neither driver has a method of its own but Close.
type Store struct {
	db *DB
}

// NewStore returns the store over db.
func NewStore(db *DB) *Store { return &Store{db: db} }

// DB is the store's database, for code written against the seam outside
// this package (a driver's own methods, tests).
func (s *Store) DB() *DB { return s.db }

// orNow returns t, or now when t is zero.
func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// nonNil stores nil bytes as empty (the columns are NOT NULL).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// engineSQL is a statement the engines need written differently (their
// planners, or a construct only one has), each documented where it is
// defined. Everything else is written once.
type engineSQL struct{ postgres, sqlite string }

// pick is q's text for s's engine.
func (s *Store) pick(q engineSQL) string {
	if s.db.Name() == "sqlite" {
		return q.sqlite
	}
	return q.postgres
}
