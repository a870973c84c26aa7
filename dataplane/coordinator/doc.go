// Package coordinator is the consumer-group coordinator of one partition of
// the internal offsets topic: the groups' committed offsets (and those
// pending in transactions) and static members' incarnations, kept in memory and in that partition, and the
// groups' membership (dataplane/group) in memory.
//
// # Model
//
// A group belongs to offsets partition PartitionOf(tenant, group, N), and
// is coordinated by that partition's leader: its broker hosts one
// Coordinator per offsets partition it leads, per leader epoch, and routes
// each group's requests to it. The Coordinator reaches the partition only
// through Partition (runtime.Partition), which the broker implements over
// its replica.
//
// Every change that must survive a failover — a committed offset, the
// member id of a static member's latest incarnation (instance id → member
// id), a group's deletion, a transaction's pending offsets and its
// marker — is a record (GroupRecordKey, GroupRecordValue of
// sluice.coordinator.v1, private to the coordinators)
// appended to the partition with acks=all at the coordinator's leader
// epoch, and applied in memory only once the ISR has it; the request is
// answered after that. A coordinator that takes over (a new leader, or a
// new epoch) rebuilds the state by reading the partition from its log start
// to its end (Load): its whole log is what it commits (Partition.CheckLeader
// holds Load back until the new leader's HW reaches its epoch start).
// Records apply in log order, so the last commit of a partition wins, and
// the last incarnation written is a static member's current one: a process
// another one replaced stays fenced across a failover.
//
// # Offsets in transactions (KIP-447)
//
// A transactional producer commits a group's offsets inside its
// transaction (TxnCommitOffsets, after its broker verified that the group
// is in the producer's current transaction at the transaction
// coordinator). They are written as pending offsets of (group, producer
// id): ordinary records (txn_offset), not a transactional batch, so the
// offsets partition never holds an open transaction and the coordinator
// applies its records itself. The transaction coordinator ends the
// transaction in the group with a marker (WriteTxnMarker, a txn_marker
// record): a commit makes the producer's pending offsets the group's
// committed offsets (unless a plain commit of the partition is later in
// the log), an abort drops them. Load replays both kinds in log order.
//
// A marker carries the ended transaction's epoch + 1 (every end bumps the
// epoch, except a Kafka client's before KIP-890 part 2, whose marker says
// it kept the epoch and ends the pending offsets of its own epoch) and the
// transaction coordinator's leader epoch; per (group,
// producer id) the coordinator keeps the last marker applied (a fence,
// which outlives the group's deletion). A TxnCommitOffsets older than the
// fence is refused (ErrProducerFenced): its transaction ended here, even if
// its verification passed before the end; the check and the write are
// atomic against the producer's markers (txnOps), which is KIP-890's
// defence for offsets. A marker ends only the producer's pending offsets of
// older epochs written before it, so a late copy of a marker never ends the
// next transaction; a marker from an older transaction coordinator than
// the fence's is refused (ErrCoordinatorFenced); one that changes nothing
// succeeds without a write. Fences are never dropped: one small entry per
// group and producer id that ever ended a transaction there, growing with
// use as the offsets partition does (it is not compacted).
//
// While pending offsets exist for a partition it is unstable
// (ErrUnstableOffset, Kafka's UNSTABLE_OFFSET_COMMIT): StableOffsets
// refuses it (and every-offset fetches of the group), CommitOffsets refuses
// a plain commit of it, and DeleteGroup refuses the group, until the
// transaction's marker comes. Pending offsets end only by a marker: the
// transaction coordinator writes one to every group in the transaction
// (also after its own failover, and when the transaction times out).
//
// The rest of the membership lives in memory only: after a failover members
// rejoin reporting the partitions they own and keep them (a group rebuilt
// with offsets or incarnations hands out partitions nobody reports only a
// SessionTimeout after the shard was loaded: a member still consuming has
// that long to rejoin, as long as the old coordinator would have waited for
// its heartbeat).
//
// Invariants:
//   - what the coordinator answers (offsets, incarnations) comes from
//     records the ISR has: those it loaded and those of its own writes that
//     were acknowledged, applied in log order (a record older in the log
//     than what its key holds is ignored). A write that failed is not
//     applied, though its records may have reached the log: a coordinator
//     loading the partition later applies them if they survived, as the
//     client, told the write failed, must expect;
//   - a write at a leader epoch the broker no longer leads at fails and
//     changes nothing (the fencing is Partition.AppendAcksAll's);
//   - a static member's new incarnation is answered only once written;
//   - a TxnCommitOffsets answered as written is pending until its
//     producer's next marker here, which commits or drops it; one whose
//     epoch the producer's last marker fenced is refused and writes
//     nothing.
//
// The scenarios in testdata/ (scenario_test.go) drive the Shard without a
// log: commits, deletions, failed writes, re-created topics, transactions'
// pending offsets, their markers and fences, and a failover replaying the
// records.
//
// # Concurrency
//
// The state machine is Shard, which does no I/O: an operation returns the
// records to write and the answer, and Replay applies a record once
// written; dataplane/runtime hosts it (Coordinator is the hosted shard's
// API) and writes the records with acks=all at the coordinator's leader
// epoch, applying them only then. Every Coordinator method may be called
// concurrently, and holds no lock across Config.Admit (asked before the
// operation). Which operations of a group exclude each other, from their
// run to their records' replay, is the runtime key each holds:
//   - a deletion, a transactional commit, a transaction marker and a
//     static member's join hold the group's key exclusively: they run one
//     at a time, each against the records of those before it (a static
//     member's join with the write of its incarnation, a transactional
//     commit's fencing check with its record and the producer's markers,
//     a commit's or deletion's pending-offsets check with the
//     transactions' records);
//   - a plain offset commit holds the group's key shared and a sub-key
//     per partition it commits: commits of different partitions (the
//     group's members') are written at once, sharing the partition's
//     syncs and replication, while commits of one partition are written
//     one at a time, in the order they run;
//   - every other heartbeat, a leave and the members' expiry change only
//     the membership, which is not persisted, and hold no key: they run
//     against the state under the runtime's lock, at once, never behind
//     another operation's append.
//
// Why that is linearizable (the runtime's rule, dataplane/runtime): an
// operation that runs while another of its group waits for its append
// sees that one's run but not its records. A heartbeat (or a leave, an
// expiry, a read) beside a commit, a transactional write or a deletion
// is ordered before it: those read no membership and change nothing in
// memory, and a heartbeat reads their records' state (offsets,
// incarnations, pending offsets) only to delay a new membership's first
// assignment, which is a read of the state before the write (that write
// has not answered yet); the deletion's record, replayed after, removes
// the members the heartbeat made, as in that order. A heartbeat beside a
// static member's join is ordered after it: it sees the join's membership
// change, and the join's record (the instance's incarnation) is read only
// when a group's membership is made, which the join did. Two commits in
// flight at once have different partitions: each reads only pending
// offsets (which neither writes), and their records change different
// offsets, so they replay in either order with the same result; so do
// different groups' records, which change different groups' state. The
// log offsets the state keeps (each offset's, a deletion's) make a record
// older in the log than what it would replace change nothing, as in a
// load. The membership's sessions are expired by the runtime's timer
// every HeartbeatInterval (Run).
package coordinator
