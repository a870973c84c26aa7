// Package txn is the transaction coordinator's state machine for one
// partition of the internal transaction-state topic (__transaction_state,
// system tenant): per (tenant, transactional id) the producer id and
// epoch, the transaction timeout, the state (Empty, Ongoing,
// PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort), the
// partitions and groups in the transaction, and its start and last update
// times (issue 16, docs/design/transactions.md).
//
// The state machine is Shard, which does no I/O: each operation returns
// the record to write (the id's whole state after the transition), the
// markers to write (an effect) and the answer, and Replay applies a record
// once written. dataplane/runtime hosts it (Coordinator is the hosted
// shard's API): it writes the records with acks=all at the coordinator's
// leader epoch and applies them only then, writes the markers through the
// MarkerWriter outside every lock and retries them until written, and runs
// the timers (transaction timeouts, idle ids). The transaction service
// (dataplane/txns) hosts one Coordinator per __transaction_state partition
// its broker leads and leader epoch, loaded by the broker's hosting loop
// (so that a takeover finishes the ends left in Prepare* without waiting
// for a client), dropped once the leadership moves; it serves
// InitProducerId with a transactional id and the TransactionService from
// it, calls AddPartitions/AddOffsets (Add) to verify a partition's or a
// group's first transactional write, and writes markers at each
// partition's leader (its broker's own replicas directly, others through
// their WriteTxnMarkers, retried across leader changes).
//
// # Model
//
// A transactional id belongs to partition PartitionOf(tenant, id, N), whose
// leader hosts one Shard per leader epoch. Every transition is one record
// (TxnRecordKey, TxnRecordValue of sluice.coordinator.v1: the id's whole
// state after it), applied only once written; the request is answered
// after that. A load on takeover replays the whole log, the last record of
// each id winning; a record with no value (written by an idle id's timer
// after Config.IdleTimeout) forgets the id.
//
// The protocol is KIP-98's with KIP-890's server-side defence:
//   - InitProducer fences older incarnations: it waits for an end in
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
//   - EndTransaction writes Prepare* with the epoch bumped; the runtime
//     then writes the markers (partition or group, commit or abort,
//     producer id, bumped epoch, the shard's leader epoch as the
//     coordinator epoch) and, once they are all written, Complete*; the
//     end answers then with the producer id and epoch to use next. Every
//     end bumps the epoch, so a late AddPartitions of an ended transaction
//     is fenced and never joins the next one. A retry of a written end
//     answers the same. The exception is KeepEpoch, for Kafka clients
//     before KIP-890 part 2, which keep their epoch: the end keeps it (its
//     markers say so: Marker.KeptEpoch), and their writes are checked with
//     Verify (the partition or group must be in the open transaction)
//     instead of joining it with Add.
//   - No lock is held while the markers are written: the id's other calls
//     are answered from its Prepare* state (an add is fenced or told
//     ErrConcurrentTransactions at once, Kafka's CONCURRENT_TRANSACTIONS);
//     a retry of the end and InitProducer wait for the markers, as they
//     waited for the end before; other ids are not held up at all.
//   - A timer aborts a transaction Ongoing past its timeout (EndedBy
//     timeout): the producer's next AddPartitions or commit with its old
//     epoch is told ErrTransactionAbortable, its abort the new epoch.
//   - An end whose markers were not all written stays Prepare* (also after
//     a takeover: the load resumes it) while the runtime retries them;
//     the end's answer is ErrConcurrentTransactions meanwhile.
//
// The scenarios in testdata/ (scenario_test.go) drive the Shard without a
// log: commit, abort, timeout, fencing by a new incarnation, a coordinator
// failover in each phase, a late batch after the end; the tests in
// coordinator_test.go drive the hosted Coordinator over a real log.
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
// A Shard is used by one goroutine at a time (the runtime's). The
// Coordinator's methods may be called concurrently: the runtime serialises
// the operations of one transactional id (from its run to its record's
// replay), runs different ids' in parallel, and holds no lock across a
// marker write, a producer id allocation (Config.AllocateProducerID, asked
// before the operation that needs it runs, which then runs again) or an
// admission (Config.Admit, asked before InitProducer's operation). The
// Coordinator starts no goroutines but the runtime's (marker writes); its
// host calls Run (timeouts, retries).
package txn
