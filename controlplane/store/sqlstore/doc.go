// Package sqlstore is the control-plane store (store.Store) written once in
// SQL for both engines, PostgreSQL and SQLite, over database/sql, with a
// small Dialect for what differs. The drivers (controlplane/store/postgres,
// controlplane/store/sqlite) open the database, apply their migrations
// (the DDL differs per engine, so each keeps its migrations directory),
// give New their Dialect and pools, and embed the resulting *Store: every
// method on *Store is a method of both drivers. Both engines pass the
// contract suite controlplane/storetest.
//
// # Writing a query once
//
// A method is a method on *Store, reading and writing through s.db (a *DB):
//
//	// GetThing implements store.Store.
//	func (s *Store) GetThing(ctx context.Context, tenantID, id string) (store.Thing, error) {
//		var t store.Thing
//		err := s.db.Read().QueryRowContext(ctx,
//			`SELECT id, name, created_at FROM things WHERE tenant_id = $1 AND id = $2`, tenantID, id).
//			Scan(&t.ID, &t.Name, sqlstore.ScanTime(&t.CreatedAt))
//		return t, s.db.Translate("get thing", err)
//	}
//
// Rules:
//
//   - Placeholders are $1, $2, ... on both engines (SQLite binds $N by
//     number, like Postgres), so a parameter may be used twice or out of
//     order. Never ?.
//   - Reads that need no transaction go to s.db.Read(); single-statement
//     writes to s.db.Write(); a read-then-write goes in s.db.InTx, reads
//     that must agree across statements in s.db.InSnapshot. On SQLite the
//     read pool is query-only: a write through Read fails.
//   - In a write transaction, end a SELECT whose rows the decision depends
//     on with s.db.Lock(LockNoKeyUpdate) (or LockShare for a fence read,
//     LockKeyShare for rows the transaction references, LockUpdate,
//     LockUpdateSkipLocked for a queue's claim; Lock(l, "p") locks only
//     table p of a join): the Postgres
//     row lock, nothing on SQLite, whose transactions hold the database's
//     write lock from BEGIN IMMEDIATE. Lock rows in one order (parent
//     before child: tenant, then topic, then partition) so that
//     transactions do not deadlock on Postgres. A per-tenant serialisation
//     (a count limit) is the tenant row locked LockNoKeyUpdate.
//   - Errors go through s.db.Translate(op, err) once, at the method's
//     return: sql.ErrNoRows is store.ErrNotFound, unique and foreign-key
//     violations are translated by the Dialect (a new unique constraint
//     gets its field name in each driver's alreadyExists map), a store
//     error returned from inside InTx passes through. MustAffect turns "no
//     row changed" into store.ErrNotFound; Collect scans a result set.
//   - Portable SQL where both engines agree (RETURNING of the target
//     table's columns, unqualified or table-qualified but not through an
//     alias, ON CONFLICT … DO UPDATE with excluded, row values, coalesce,
//     CASE, count, sum, EXISTS, window functions, UPDATE … FROM,
//     true/false; INSERT … SELECT … ON CONFLICT needs a WHERE on SQLite:
//     WHERE true); the Dialect for the rest: Greatest (the scalar max),
//     Bytewise (text ordered bytewise), In (membership in a list
//     parameter), Cast (text into a json column), Records (a set of rows in
//     one JSON parameter, encoded by Records: bulk inserts and updates in
//     one statement whatever their size). A statement the engines' planners
//     need written differently is an engineSQL (both texts, side by side,
//     with the reason); there are three.
//   - Values: TEXT ids, BIGINT integers (unix milliseconds for new time
//     columns), BOOLEAN (INTEGER 0/1 on SQLite, which database/sql scans
//     into bool), bytes (BYTEA / BLOB) and JSON text need no help. The
//     older tables keep engine types: their timestamp columns are encoded
//     with s.db.Time / s.db.NullTime and scanned with ScanTime; their list
//     columns (integer[] and text[] on Postgres, JSON text on SQLite) with
//     s.db.Int32s / s.db.Strings and ScanInt32s / ScanStrings; their uuid
//     ids are passed and scanned as canonical strings (store.CanonicalID
//     first: a malformed id is refused by a Postgres uuid column).
//
// # Engines
//
// Postgres is pgx behind database/sql (stdlib.OpenDBFromPool over the
// driver's pgxpool), one pool for reads and writes, READ COMMITTED write
// transactions and REPEATABLE READ READ ONLY snapshots. List parameters
// travel as array literals in text (the server parses them as the column's
// array type), record sets as one jsonb parameter (jsonb_to_recordset); no
// method needs pgx's own API (COPY, batches): one statement per bulk write
// is as few round trips as a pipeline would be. SQLite
// (modernc.org/sqlite) has a write pool of one connection whose
// transactions BEGIN IMMEDIATE, and a read pool of query-only connections
// in WAL mode; every write, single statements included, goes through the
// write pool, so the process never sees SQLITE_BUSY from itself.
package sqlstore
