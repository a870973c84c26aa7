// Package txn is the transaction coordinator's state machine for one
// partition of the internal transaction-state topic (__transaction_state,
// system tenant): per (tenant, transactional id) the producer id and
// epoch, the transaction timeout, the state (Empty, Ongoing,
// PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort), the
// partitions and groups in the transaction, and its start and last update
// times (issue 16, docs/design/transactions.md).
//
// The broker (dataplane/broker: txn.go, txnrpc.go, txnmarkers.go) runs one
// Coordinator per __transaction_state partition it leads and leader
// epoch, made and loaded when first asked for and by its periodic loop
// (so that a takeover finishes the ends left in Prepare* without waiting
// for a client), dropped once the leadership moves; it serves
// InitProducerId with a transactional id and the TransactionService from
// it, calls AddPartitions/AddOffsets (Add) to verify a partition's or a
// group's first transactional write, writes markers through its
// MarkerWriter (at each partition's leader: its own replicas directly,
// others through ReplicaService.WriteTxnMarkers, retried across leader
// changes), and calls Expire and FinishPending every second.
//
// # Model
//
// It copies the group coordinator's (dataplane/coordinator): a
// transactional id belongs to partition PartitionOf(tenant, id, N), whose
// leader runs one Coordinator per leader epoch, reaching the partition only
// through Partition. Every transition is one record (TxnRecordKey,
// TxnRecordValue of sluice.coordinator.v1: the id's whole state after it) appended with acks=all at
// the coordinator's leader epoch, and applied in memory only once written;
// the request is answered after that. Load on takeover reads the whole log,
// the last record of each id winning; a record with no value (written by
// Expire for an id idle for Config.IdleTimeout) forgets the id.
//
// The protocol is KIP-98's with KIP-890's server-side defence:
//   - InitProducer fences older incarnations: it finishes an end in
//     progress, aborts an open transaction, and bumps the epoch (a new
//     producer id at epoch 0 when the bump would reach math.MaxInt16).
//   - AddPartitions and AddOffsets accept only the current producer id and
//     epoch, in Empty, Ongoing or Complete* (the first one begins a
//     transaction: Ongoing, its timeout running); AddPartitions is what a
//     partition leader will call to verify a producer's first
//     transactional batch (Add does both in one write). A transaction
//     holds at most its tenant's Config.Bounds of partitions and of groups
//     (what its end writes markers to): an add past them is refused whole
//     (ErrTooLarge).
//   - EndTransaction writes Prepare* with the epoch bumped, hands the
//     markers (partition or group, commit or abort, producer id, bumped
//     epoch, its own leader epoch as the coordinator epoch) to the
//     MarkerWriter, writes Complete*, and answers then with
//     the producer id and epoch to use next. Every end bumps the epoch, so
//     a late AddPartitions of an ended transaction is fenced and never
//     joins the next one. A retry of a written end answers the same.
//   - Expire aborts transactions Ongoing past their timeout (EndedBy
//     timeout): the producer's next AddPartitions or commit with its old
//     epoch is told ErrTransactionAbortable, its abort the new epoch.
//   - An end whose markers were not all written stays Prepare* (also after
//     a takeover: Load keeps it); FinishPending, a retry of the same end
//     or the next InitProducer writes the markers and Complete*.
//
// The scenarios in testdata/ (scenario_test.go) drive it over real logs:
// commit, abort, timeout, fencing by a new incarnation, a coordinator
// failover in each phase, a late batch after the end.
//
// Errors carry a Class (ClassOf): fatal (ErrProducerFenced, ...),
// abortable (ErrTransactionAbortable, ErrTooLarge) or retriable
// (ErrConcurrentTransactions, ErrNotCoordinator).
//
// Invariants:
//   - what the coordinator answers comes from records the ISR has;
//   - the epoch a producer's batches carry is below math.MaxInt16, and its
//     transaction's markers carry that epoch + 1, which is also the epoch
//     (or a new producer id's epoch 0) its next transaction uses;
//   - a transactional id's records are written one at a time, in the order
//     of its transitions.
//
// # Concurrency
//
// Every method may be called concurrently. Each transactional id has an
// operation lock (entry.op, a one-token channel so waiting honours the
// context) held by the one operation changing it, across its writes, its
// marker writes, producer id allocations and its admission (Config.Admit);
// operations on one id are serialised, operations on different ids run in
// parallel. mu guards the map of ids and each id's state; it is never held
// across a read of or a write to the partition, a marker write, an
// allocation or an admission. loadMu serialises Load, which reads the log
// into a map of its own and publishes it under mu (until then every
// operation is ErrNotCoordinator, and the readers, Open and Describe, see
// nothing). Lock order: loadMu, then mu; an id's operation lock, then mu;
// never an operation lock while holding mu. Expire and FinishPending skip
// ids whose operation lock is held. Expire removes a forgotten id's entry
// while holding its operation lock; an operation that waited for that
// entry sees it is no longer the id's and takes the current one. The
// Coordinator starts no goroutines: its broker calls Expire and
// FinishPending periodically.
package txn
