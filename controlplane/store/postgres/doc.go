// Package postgres is the production driver of the control-plane store
// (store.Store) on PostgreSQL, through pgx (pgxpool).
//
// The driver opens the pool, applies its migrations and gives
// controlplane/store/sqlstore its dialect (dialect.go: row-locking clauses,
// array and record parameters, error translation); Store embeds sqlstore's
// *Store, where every method is written once for both engines, over
// database/sql on the same pool (stdlib.OpenDBFromPool). The concurrency
// below is that SQL's on Postgres.
//
// # Model
//
// migrations/ holds the goose migrations, embedded and applied by Open under
// a Postgres session advisory lock, so several control-plane replicas may
// start at once against one database: one migrates, the others wait and then
// find nothing to do.
//
// Tenant and topic ids are uuid columns (a malformed id can name nothing, so
// lookups by one are store.ErrNotFound); replicas and ISR are integer[];
// scopes text[]; tenant overrides jsonb (returned as Postgres normalises the
// JSON text). Times are timestamptz, truncated to the millisecond on write so
// that both drivers return identical values, and read back in UTC.
//
// # Concurrency
//
// Each method is one statement or one transaction at READ COMMITTED:
//
//   - CreateTopic locks the tenant row (SELECT … FOR NO KEY UPDATE), which
//     serialises topic creations of one tenant, then counts, checks the
//     limits and inserts the topic and its partitions (one INSERT … SELECT
//     FROM jsonb_to_recordset). Other tenants,
//     and API-key inserts of the same tenant (their foreign-key check takes
//     FOR KEY SHARE), are not blocked.
//   - UpdatePartition is a single UPDATE … WHERE partition_epoch = expected:
//     concurrent writers queue on the row lock and re-check the predicate
//     against the committed row, so exactly one wins each epoch.
//   - RegisterBroker is an INSERT … ON CONFLICT DO UPDATE SET epoch = epoch+1;
//     HeartbeatBroker an UPDATE … WHERE epoch = current.
//   - AcquireControllerLease is one UPDATE of the single lease row WHERE the
//     caller holds it or it has expired: contenders queue on the row lock and
//     re-check the predicate, so one takes an expired lease.
//   - UpdatePartitionFenced reads the lease row FOR SHARE and then does the
//     UpdatePartition compare-and-set in one transaction: a takeover (which
//     updates the row) waits for in-flight fenced writes and every later
//     write sees the new epoch.
//   - UpdatePartitions (and UpdatePartitionsFenced, after the same lease
//     check) first locks every partition it names in key order (SELECT …
//     ORDER BY topic_id, partition FOR UPDATE), which also reads their
//     epochs, then writes the winners in one UPDATE … FROM
//     jsonb_to_recordset(…) per round:
//     batches over overlapping partitions lock in one order, and take the
//     metadata version row only after all their partition rows, so neither
//     they nor single-row writers deadlock on each other.
//   - AddRemoteSegment and UpdateRemoteSegmentState read the broker row FOR
//     SHARE and the partition row FOR NO KEY UPDATE, then decide and write in
//     the same transaction: a leader change (an UPDATE of the partition row)
//     and a re-registration wait for an in-flight remote-segment write, and
//     the partition's remote-segment writes run one at a time, each seeing
//     the finished segments of those before it (READ COMMITTED reads after
//     the lock is granted).
//   - TransitionAlert creates with INSERT … ON CONFLICT DO NOTHING on the
//     partial unique index of active alerts (one of racing creators
//     inserts) and moves with SELECT … FOR UPDATE then UPDATE (racing
//     movers queue on the row and re-read the committed state).
//     CreateWebhook locks the tenant row as CreateTopic does.
//   - ReserveObjects locks the tenant row as CreateTopic does, then every
//     pending reservation of the tenant in (kind, name) order (SELECT …
//     ORDER BY … FOR UPDATE), then reads the fresh quota reports, decides
//     and upserts the grants. PutQuotaReports, after replacing the broker's
//     reports, locks the reservations it confirms in (tenant, kind, name)
//     order and deletes them: the two lock reservation rows in one order,
//     and a confirmation either commits before a decision locks its row or
//     waits for the decision, so no decision sees a report without its
//     reservation's deletion, or the other way round.
//     ClaimDeliveries leases rows picked FOR UPDATE SKIP LOCKED; the Mark…
//     calls lock the delivery and check the lease token.
//   - The metadata version row is bumped by triggers (migrations/00002) in
//     the transaction of each topic, partition or broker-registration change
//     (for partition updates once per statement that changed a row,
//     migrations/00012, so a batch bumps it once); writers serialise on it
//     briefly at commit.
//   - A BEFORE ROW trigger (migrations/00011) stamps each topic and
//     partition row written with the version its transaction commits at
//     most (changed_version), read with the metadata version row locked
//     after the written row, as the bump locks it; a topic deletion leaves
//     a tombstone. MetadataChangesSince reads those by index.
//   - The broker load (PartitionLoad) is a counter row per broker, moved by
//     statement triggers on partitions (migrations/00010) in the same
//     transaction, after the metadata version's bump (its update trigger's
//     name sorts first), so partition writers
//     already hold the metadata version row when they write it.
//
// Errors are translated once (sqlstore's DB.Translate with this dialect's
// Translate): sql.ErrNoRows → store.ErrNotFound; unique_violation (23505) →
// *store.AlreadyExistsError naming the field after the constraint
// (alreadyExists); foreign_key_violation (23503) → store.ErrNotFound (the
// referenced tenant or topic is missing). Anything else is wrapped with the
// operation's name.
package postgres
