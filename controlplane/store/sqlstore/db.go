package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Dialect is what differs between the engines, for queries written once.
// The drivers implement it (controlplane/store/postgres, .../sqlite); sqlstore
// imports neither engine's packages.
type Dialect interface {
	// Name is the engine's name, "postgres" or "sqlite" (for logs and
	// errors).
	Name() string
	// Translate returns the store error that the engine error err means (a
	// unique violation is a *store.AlreadyExistsError naming the field, a
	// foreign-key violation store.ErrNotFound), or nil when it means none.
	Translate(err error) error

	// Time encodes a time for a timestamp column (timestamptz on Postgres,
	// unix milliseconds on SQLite), truncated to the millisecond. Read
	// times back with ScanTime.
	Time(t time.Time) any
	// NullTime is Time, with the zero time stored as NULL.
	NullTime(t time.Time) any
	// Int32s and Strings encode a list for a list column (integer[] and
	// text[] on Postgres, JSON text on SQLite), nil as the empty list, and
	// for In. Read lists back with ScanInt32s and ScanStrings.
	Int32s(v []int32) any
	Strings(v []string) any

	// In is the condition "expr is in the list param" for a list
	// parameter encoded by Int32s or Strings: In("state", "$3") is
	// "state = ANY ($3)" on Postgres. An empty list matches nothing.
	In(expr, param string) string
	// Lock is the row-locking clause that ends a SELECT of a write
	// transaction (" FOR UPDATE", ...; of names the tables of a join
	// whose rows are locked, " FOR NO KEY UPDATE OF p"), or "" where the
	// transaction's lock already serialises (SQLite: the database's
	// write lock, held from BEGIN IMMEDIATE).
	Lock(l Lock, of ...string) string
	// Records is a FROM item, named alias, of the rows in a JSON array
	// parameter (text, as Records encodes it), one object per row with
	// the fields cols: a set of rows in one parameter, for bulk inserts
	// and updates in one statement ("INSERT INTO t (a, b) SELECT a, b
	// FROM "+db.Records("$1", "r", cols...)). Fields are cast to the
	// columns' Types on Postgres (jsonb_to_recordset); SQLite reads
	// them with json_extract, a list field as JSON text, as list
	// columns store them.
	Records(param, alias string, cols ...Column) string
	// Cast is expr converted to the column type pgType where the engine
	// needs it (Postgres: "CAST(expr AS json)" for a json column set from
	// text), expr itself on SQLite.
	Cast(expr, pgType string) string
	// Greatest is the name of the scalar maximum function ("greatest" on
	// Postgres, "max" on SQLite).
	Greatest() string
	// Bytewise is the collation clause that orders text bytewise
	// (` COLLATE "C"` on Postgres; SQLite's default is already bytewise).
	Bytewise() string
}

// Column is a field of Dialect.Records: its name and its type as Postgres
// spells it ("uuid", "integer", "bigint", "text", "boolean",
// "integer[]", "timestamptz"), for SQLite only its name.
type Column struct{ Name, Type string }

// Records encodes rows for Dialect.Records: a JSON array of rows, each
// a struct whose JSON field names are the Columns' names (lists non-nil:
// JSON null is not a list; times as Dialect.Time encodes them, so in
// columns of Postgres type timestamptz and SQLite INTEGER).
func Records[T any](rows []T) (string, error) {
	if rows == nil {
		rows = []T{}
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return "", fmt.Errorf("encode records: %w", err)
	}
	return string(b), nil
}

// Lock is a row lock taken by a SELECT in a write transaction.
type Lock int

const (
	// LockShare (FOR SHARE) blocks writers of the row until commit, not
	// other sharers: a fence read ("this epoch is still current").
	LockShare Lock = iota
	// LockNoKeyUpdate (FOR NO KEY UPDATE) serialises the writers of a
	// row that do not change its key, without blocking inserts that
	// reference it (their foreign-key check takes FOR KEY SHARE).
	LockNoKeyUpdate
	// LockKeyShare (FOR KEY SHARE) only blocks deleting the row or
	// changing its key: the rows a transaction inserts references to.
	LockKeyShare
	// LockUpdate (FOR UPDATE) is the strongest row lock.
	LockUpdate
	// LockUpdateSkipLocked (FOR UPDATE SKIP LOCKED) locks the rows not
	// locked by others and skips the rest: a queue's claim.
	LockUpdateSkipLocked
)

// Querier is what both a pool (*sql.DB) and a transaction (*sql.Tx) offer.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is the store's database: a Dialect and two database/sql pools, one for
// reads and one for writes (the same pool on Postgres; on SQLite the write
// pool is one connection whose transactions BEGIN IMMEDIATE, the read pool
// several query-only connections). Create it with New.
type DB struct {
	Dialect
	read, write *sql.DB
	snapshot    *sql.TxOptions
	gate        *writeGate // nil unless Config.SingleWriter
}

// Config is what a driver gives New.
type Config struct {
	Dialect Dialect
	// Read serves reads outside transactions and snapshots; Write every
	// write, single statements included. They may be the same pool.
	Read, Write *sql.DB
	// Snapshot are the options of a read-only transaction that reads one
	// consistent snapshot (Postgres: REPEATABLE READ, READ ONLY; nil where
	// a transaction of the read pool already reads one, as on SQLite in
	// WAL mode).
	Snapshot *sql.TxOptions
	// SingleWriter: Write is one connection (SQLite). Its callers then
	// queue for it in order, urgent ones first (Lane), not as
	// database/sql picks among them (at random).
	SingleWriter bool
}

// New returns the DB of c. It does not own the pools: the driver closes
// them.
func New(c Config) *DB {
	db := &DB{Dialect: c.Dialect, read: c.Read, write: c.Write, snapshot: c.Snapshot}
	if c.SingleWriter {
		db.gate = &writeGate{}
	}
	return db
}

// Read is the pool for reads that need no transaction (one statement reads
// one snapshot on both engines).
func (db *DB) Read() Querier { return db.read }

// Write is the pool for single-statement writes, outside InTx.
func (db *DB) Write() Querier { return db.WriteIn(LaneNormal) }

// WriteIn is Write for a write of lane: on a single-writer database an
// urgent write goes before the normal ones waiting.
func (db *DB) WriteIn(lane Lane) Querier {
	if db.gate == nil {
		return db.write
	}
	return gatedWrite{db: db, lane: lane}
}

// WriteQueue returns the counts of each lane of a single-writer
// database's queue (indexed by Lane), or false when writes do not queue.
func (db *DB) WriteQueue() ([numLanes]LaneStats, bool) {
	if db.gate == nil {
		return [numLanes]LaneStats{}, false
	}
	return db.gate.snapshot(), true
}

// gatedWrite is the write pool of a single-writer database, entered
// through its gate.
type gatedWrite struct {
	db   *DB
	lane Lane
}

func (w gatedWrite) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := w.db.gate.enter(ctx, w.lane); err != nil {
		return nil, err
	}
	defer w.db.gate.leave()
	return w.db.write.ExecContext(ctx, query, args...)
}

func (w gatedWrite) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := w.db.gate.enter(ctx, w.lane); err != nil {
		return nil, err
	}
	defer w.db.gate.leave()
	return w.db.write.QueryContext(ctx, query, args...)
}

// QueryRowContext leaves the gate once the row's query ran: the
// connection is the row's until Scan, and the next caller waits for it in
// the pool.
func (w gatedWrite) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if err := w.db.gate.enter(ctx, w.lane); err != nil {
		// ctx ended: the pool answers a row that holds ctx's error.
		return w.db.write.QueryRowContext(ctx, query, args...)
	}
	defer w.db.gate.leave()
	return w.db.write.QueryRowContext(ctx, query, args...)
}

// InTx runs fn in a write transaction and commits it, or rolls it back when
// fn fails (returning fn's error, untranslated). The isolation is the
// engine's default for writes: READ COMMITTED on Postgres, where rows a
// decision depends on are locked with Lock; SERIALIZABLE in effect on
// SQLite, where the transaction holds the database's write lock from its
// start. Neither needs a retry loop: Postgres writes that lock rows lock
// them in one order (see the driver docs), SQLite waits on a busy
// database for its busy timeout.
func (db *DB) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if db.gate == nil {
		return inTx(ctx, db.write, nil, fn)
	}
	if err := db.gate.enter(ctx, LaneNormal); err != nil {
		return err
	}
	tx, err := db.write.BeginTx(ctx, nil)
	db.gate.leave()
	if err != nil {
		return err
	}
	return runTx(tx, fn)
}

// InSnapshot runs fn in a read-only transaction that reads one consistent
// snapshot of the database, for reads of several statements that must
// agree.
func (db *DB) InSnapshot(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return inTx(ctx, db.read, db.snapshot, fn)
}

func inTx(ctx context.Context, pool *sql.DB, opts *sql.TxOptions, fn func(tx *sql.Tx) error) error {
	tx, err := pool.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	return runTx(tx, fn)
}

// runTx runs fn in tx and commits it, or rolls it back when fn fails.
func runTx(tx *sql.Tx, fn func(tx *sql.Tx) error) (err error) {
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Translate turns an error of a query into the store's errors:
// sql.ErrNoRows is store.ErrNotFound, a store error (returned from inside a
// transaction) is itself, an engine error is what the Dialect says it
// means; anything else is wrapped with op.
func (db *DB) Translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if isStoreError(err) {
		return err
	}
	if e := db.Dialect.Translate(err); e != nil {
		return e
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isStoreError reports whether err already is one of the store's errors.
func isStoreError(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAlreadyExists) ||
		errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLimitExceeded)
}

// MustAffect turns "no row affected" into sql.ErrNoRows (so
// store.ErrNotFound once translated).
func MustAffect(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return sql.ErrNoRows
	}
	return nil
}

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Collect scans every row of rows with scan and closes rows; errors, of the
// query (err) too, are translated with op:
//
//	rows, err := s.db.Read().QueryContext(ctx, q, args...)
//	return sqlstore.Collect(s.db, rows, err, scanX, "list x")
func Collect[T any](db *DB, rows *sql.Rows, err error, scan func(Scanner) (T, error), op string) ([]T, error) {
	if err != nil {
		return nil, db.Translate(op, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, db.Translate(op, err)
		}
		out = append(out, v)
	}
	return out, db.Translate(op, rows.Err())
}
