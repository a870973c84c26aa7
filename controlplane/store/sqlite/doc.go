// Package sqlite is the SQLite driver of the control-plane store
// (store.Store), used by `sluice dev`: one file on local disk, no server, no
// cgo (modernc.org/sqlite).
//
// The driver opens the two pools below, applies its migrations and gives
// controlplane/store/sqlstore its dialect (dialect.go: no row locks, JSON
// list and record parameters, error translation); Store embeds sqlstore's
// *Store, where every method is written once for both engines. The
// concurrency below is that SQL's on SQLite.
//
// # Model
//
// The schema mirrors the Postgres driver's (migrations/ holds the goose
// migrations, applied by Open). Ids are canonical lowercase UUID text, times
// are unix milliseconds in INTEGER columns (read back in UTC), and the int and
// string lists (replicas, ISR, scopes) are JSON text.
//
// # Concurrency
//
// SQLite has one writer. The store keeps two database/sql pools over the same
// file:
//
//   - the write pool has exactly one connection, and its transactions start
//     with BEGIN IMMEDIATE (DSN _txlock=immediate), so every read-then-write
//     sequence (the limit check of CreateTopic, compare-and-set of a partition)
//     runs serialised against all other writes of this process, and against
//     other processes through the busy timeout;
//   - the read pool has several connections opened query-only; in WAL mode
//     readers never block the writer nor each other, and a read that starts
//     after a write returned sees it.
//
// Every write goes through the write pool, including the single-statement
// ones, so this process never sees SQLITE_BUSY from itself. The writers
// queue for its connection in order (sqlstore.Config.SingleWriter), a
// broker's heartbeat and the controller's lease ahead of the other writes
// waiting (database/sql alone hands a freed connection to a random
// waiter: under load, brokers lost their leases behind metadata writes).
// The control plane exports the queue per lane as
// sluice_controlplane_store_write_queue_{waiting,writes_total,wait_seconds_total}. The controller
// lease is one UPDATE through it, and the fenced partition write a write
// transaction: the lock held from the epoch check to the commit is what
// fences a deposed controller. So are the remote-segment writes: the leader's fence (broker
// epoch, leader, leader epoch) and the next base offset are read and the row
// written under the one write lock; so are alert transitions, webhook
// creation (count and insert) and delivery claims. The metadata version is bumped by
// triggers (migrations/00002; since 00011 they also stamp each topic and
// partition row with the version and leave a tombstone per deleted topic,
// for MetadataChangesSince), and the broker load (PartitionLoad) is a
// counter row per broker that triggers on partitions move (migrations/00010).
//
// Errors are translated once (sqlstore's DB.Translate with this dialect's
// Translate): sql.ErrNoRows → store.ErrNotFound,
// UNIQUE/PRIMARY KEY violations → *store.AlreadyExistsError naming the field,
// FOREIGN KEY violations → store.ErrNotFound (the referenced tenant or topic is
// missing).
package sqlite
