// Package partition is one partition replica on a broker: its log
// (dataplane/log), the replication state machine of its role
// (dataplane/replica's Leader or Follower), the idempotent producers' state
// (dataplane/producerstate), its high-watermark checkpoint, retention and,
// with tiered storage, the copy of its closed segments to the object store.
// The broker's replica manager (dataplane/replicas) decides which replicas
// it hosts, opens each with Open, hands it every assignment the controller
// publishes (Update), writes every replica's HW to its checkpoint
// (dataplane/partition/hwcheckpoint) and runs SnapshotProducers and
// ApplyRetention on every replica; the services route clients' produce
// and fetch requests to it; the broker serves follower brokers' fetch
// sessions through the Sessions NewSessions makes
// (dataplane/partition/fetchsession) and runs the loops that call
// AlterISRs (every leader's ISR proposal in one AlterPartitions call per
// round) and CopyToTier. A replica reaches its broker only
// through the Host the broker gives it: its id and broker epoch, a logger
// and counters, the log settings, the leader's address for NotLeader
// errors, a fetcher.LeaderClient (the replica service of a leader broker)
// for the fetcher of each leader broker (dataplane/partition/fetcher,
// which the Host runs), the controller's AlterPartitions and
// AlterPartition, a fail-stop callback and the tiered storage.
//
// # Errors
//
// A replica refuses with the data plane's domain errors (dataplane/derr),
// never a protocol's: a *NotLeaderError (derr.NotLeaderError) with the
// leader hint, NotEnoughReplicas with the ISR and min ISR, the producer
// state's refusals with the ProducerError and TransactionError reasons,
// OffsetOutOfRange with the range, ErrHWCatchingUp (OffsetNotAvailable),
// and the outcome-unknown ends of an acks=all wait (RequestTimedOut,
// NotEnoughReplicasAfterAppend, NotLeaderAfterAppend, StorageUnavailable).
// The broker's Connect adapter maps them to codes and details in one place
// (dataplane/connecterr). The calls a replica makes through its Host come
// back as domain errors too: the broker translates the Connect errors of
// its clients (connecterr.FromConnect), so a stale partition epoch from
// the controller is derr.InvalidUpdateVersion (a typed detail of its
// answer, not its message) and a leader without FetchReplicas
// derr.UnsupportedVersion. This package does not import
// connectrpc.com/connect (internal/layering).
//
// # Model
//
// A replica leads, follows or does neither, as the last assignment says.
// The state machine of the role owns the high watermark, the ISR and the
// acks=all waits; the replica keeps no copy of them (between roles, only
// the HW the last one ended with, which seeds the next), so the scenario
// files and model tests of dataplane/replica, and this package's
// TestPartitionReplicationModel, exercise exactly what brokers run.
//
//   - HW ≤ LEO; a leader's HW counts only offsets each ISR member reported
//     durable (followers sync what they fetched before their next fetch
//     reports it), and never goes back for readers: a new leader answers
//     ErrHWCatchingUp until its HW reaches where its epoch started.
//   - acks=all is refused (NotEnoughReplicas) while the ISR is below min
//     ISR, before the producer's sequence is checked (so without the wait
//     for a sequence gap); once accepted, it is acknowledged only when the leadership that
//     appended the records has them in every ISR member; if that
//     leadership ends first the outcome is reported unknown.
//   - A follower appends the leader's batches unchanged and truncates only
//     as its state machine decides from the leader's diverging epoch
//     (KIP-101/279/320), never below its HW unless the topic opted in to
//     unclean election.
//   - Retention never deletes above the last stable offset (so never
//     above the HW), and with tiered storage never what is not copied.
//   - A log that fails a write or a sync, or producer state that cannot be
//     rebuilt, stops the broker (Host.FailStop): a replica never serves a
//     disk it cannot trust.
//
// # Producer-state snapshots
//
// As in Kafka, a replica's producer state is snapshotted at segment roll
// and at close, not as producers write: the broker's checkpoint loop calls
// SnapshotProducers every second, which writes one only when the active
// segment's base moved past the newest snapshot (and expires idle
// producers in memory every 30 s), and the broker's shutdown calls it with
// force. So a replica that takes records without rolling writes no
// snapshot (at 6000 partitions, the previous snapshot per changed
// partition every 30 s cost 12,000 fsyncs in a burst). Open rebuilds the
// state from the newest snapshot and the log after it: nothing after a
// clean close, and after a crash at most the active segment, which the
// log's unclean open scans by CRC anyway, plus, when the crash came
// within a second of a roll, the tail of the segment before it. A
// producer expired in memory but still in the newest snapshot or the log
// after it is known again after a crash, until it expires again.
//
// # Transactions (issue 16)
//
// The producer state (dataplane/producerstate) tracks transactions on
// leaders, followers and in rebuilds alike: data batches are applied from
// their headers (FromHeader), control batches (transaction markers) with
// their control record (FromBatch), so a marker ends its producer's
// ongoing transaction here, bumps its epoch and records an abort.
//
//   - WriteMarker is how a transaction coordinator ends a transaction on
//     the partition: as leader, under the lock, the marker is checked
//     (CheckMarker: an older producer epoch, or an older coordinator epoch
//     than the producer's last marker, is refused with the transaction
//     reason PRODUCER_FENCED: InvalidProducerEpoch, or
//     TransactionCoordinatorFenced for an older coordinator), encoded
//     (record.MarkerBatch), appended at the leader epoch through the same
//     append, sync and acks=all wait as Produce (always acks=all), and
//     its offset returned once the ISR has it. A retried marker passes
//     and appends a control batch that ends nothing.
//   - ProduceTransactional takes a transactional producer's batches with a
//     Verifier: before the first transactional batch of an epoch not
//     verified on this leadership, the replica releases its lock and asks
//     the verifier (the broker's: the transaction coordinator's
//     AddPartitions, KIP-890), then checks again from the start under the
//     lock. The cache of verified (producer, epoch) is cleared for a
//     producer by its every marker and whole at every role change; one
//     verification per producer and epoch is in flight at a time (others
//     wait for it). CheckTransactional then fences an epoch older than the
//     producer's here: a marker bumps the epoch, so a delayed batch of an
//     ended transaction is refused even when its verification raced the
//     marker (for a Kafka producer before KIP-890 part 2, whose markers
//     keep its epoch, the verifier only checks that the partition is in
//     its open transaction, and that check is what refuses such a batch).
//     Produce refuses transactional batches (not verified).
//   - The last stable offset (lsoLocked, LastStableOffset, ReaderOffsets)
//     is the first offset of the oldest transaction that is ongoing or
//     whose marker the HW has not passed yet (Replica.unreplicated, as
//     Kafka's unreplicated transactions), else the HW; never below the log
//     start. A transaction thus ends for readers once its marker is
//     committed, and the LSO never goes back when leadership moves within
//     the ISR.
//   - FetchRecords serves clients: whole batches below the HW
//     (read_uncommitted) or the LSO (ReadCommitted), never control
//     batches, and with ReadCommitted without the batches of aborted
//     transactions (the producer state's aborted list over the range,
//     read under the lock with the LSO), compacted in the read's buffer;
//     Fetched.Next passes dropped batches. A read_committed long poll
//     waits on the same wake-ups as any (appends, HW, role), and the LSO
//     only moves with those. Reads of the object store are filtered the
//     same way, from the same in-memory list.
//   - Retention stays below the LSO (so below the HW, and never at an
//     open transaction's segment or after it) and drops the aborted
//     transactions below the new log start from the producer state (the
//     list survives restarts in the producer-state snapshots). With tiered
//     storage the leader copies only segments below the LSO, each with
//     its aborted-transaction index (tierSource.TxnIndex: the producer
//     state's aborted transactions overlapping the segment, final since
//     every transaction there has ended; producerstate.EncodeAbortedIndex,
//     uploaded as <key>.txnindex), and a read_committed read of the
//     object store filters with the index of the segment it reads (plus
//     the in-memory list). A replica that starts over without the history
//     (a log Reset to its leader's log start, or a rebuild without a
//     snapshot above a log start) records from where it knows the aborted
//     transactions (the file "aborted-known-from" in its directory); only
//     for a remote segment without an index (copied before indexes
//     existed) does that matter: leading, it refuses read_committed reads
//     of such a segment below it (StorageUnavailable) rather than return aborted
//     records.
//
// # High-watermark checkpoint
//
// A broker keeps the HWs of its replicas in one checkpoint file in its
// data directory (dataplane/partition/hwcheckpoint, whose doc has the
// file's format, when the broker writes it and what it promises); a
// replica's entry comes from HighWatermark. Open takes the checkpointed
// HW from the broker (Spec.HW, Spec.HWKnown) and caps it at the LEO. A
// partition the broker's file does not hold falls back to the legacy
// per-partition file "high-watermark" in its directory (the decimal HW)
// that brokers before this one wrote, else to 0; HWCheckpointed removes
// that legacy file once a durable broker checkpoint holds the partition,
// so an upgrade loses no HW.
//
// # Locking and goroutines
//
// Replica.mu guards the role, the assignment, the state machines, the
// producer state and the acks=all waiters, and serialises every call to the
// state machines. The log has its own single-writer discipline: only the
// goroutine holding mu appends or truncates. mu is never held across a
// network call, nor across the log's fsyncs: a produce appends under it and
// syncs after releasing it (producers arriving meanwhile share the next
// sync), and a follower syncs what it fetched before it takes mu to build
// the next fetch. The exceptions are rare file writes that must not race a
// truncation: the producer-state snapshot (SnapshotProducers: once after
// each segment roll, and at close) and a follower's truncation or reset
// itself, whose rebuild of the producer state replays the log from the
// newest snapshot at or below the new LEO (at most the active segment,
// and the one before it for an interval after a roll).
// Retention (ApplyRetention) also runs under mu, and when it deletes
// segments it waits for a sync in flight (the log's structMu). Lock order: the replica manager's lock (dataplane/replicas), then Replica.mu, then the log's
// writer lock.
//
// A replica owns no goroutine of its own. Its follower side is the
// Host's fetcher of its leader (dataplane/partition/fetcher): one per
// leader broker, with one goroutine and one fetch session carrying every
// replica here that follows a partition of that leader. Update registers
// a follower with it (under mu), the role's end (a new assignment, Stop)
// unregisters it. A round of the fetcher reads each replica's position
// under its mu and applies each answer under it (applyFetch), and makes
// fetched batches durable and sends its request outside every lock: only
// the round writes a following replica's log. On the leader side, the
// fetch sessions (dataplane/partition/fetchsession) serve the follower
// brokers from the request's goroutine: a session is a watcher of each
// replica it carries, which notifyLocked signals (a mark and a
// non-blocking send on the session's wake channel) under the replica's
// mu. Lock order there: a session's lock, then Replica.mu, then the
// session's dirty-set lock; the fetchers' locks come after Replica.mu.
// A new leadership whose log tail is not yet durable syncs it in a
// short-lived goroutine of its own.
package partition
