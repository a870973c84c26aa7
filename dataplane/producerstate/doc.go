// Package producerstate is the idempotent producer state of one partition
// replica (Kafka's ProducerStateManager): per producer id, its epoch and the
// sequence numbers and offsets of its newest MaxCachedBatches batches, and
// the partition side of transactions (each producer's ongoing transaction,
// the aborted ones, the first unstable offset), with snapshot files and a
// rebuild from the log.
//
// dataplane/partition applies markers (WriteMarker, a follower's fetch,
// a rebuild) and checks transactional batches with CheckTransactional
// (ProduceTransactional); docs/design/transactions.md says what of
// transactions is wired.
//
// # Semantics
//
// An idempotent producer numbers its records per partition from 0; a batch
// carries its producer id, epoch and first sequence number, and its last
// sequence is first + records - 1, wrapping past math.MaxInt32 to 0. Before
// a leader appends a client batch it asks Check:
//
//   - An unknown producer id must start at sequence 0, else a *SequenceError
//     with Unknown set: the state expired (Expire) or the producer was never
//     seen, and the client must bump its epoch or re-initialise (KIP-360).
//   - An epoch older than the producer's is fenced (ErrProducerFenced).
//   - A newer epoch must start at sequence 0 (else a *SequenceError); its
//     first batch replaces the producer's cached batches.
//   - In the current epoch, a batch with the first and last sequence of a
//     cached batch is a retry: Check returns Duplicate with the original
//     offsets and the leader does not append it. The same first sequence
//     with another last one is ErrInvalidSequence. A batch starting one past
//     the newest cached batch is next in order. A first sequence behind the
//     oldest cached batch (on the circle of 2^31 sequence numbers, anything
//     within half the circle behind) is an old retry whose offsets are
//     gone: ErrDuplicateSequence. Anything else, ahead (a gap) or inside the
//     cached window without matching a batch, is a *SequenceError with the
//     expected sequence (ErrOutOfOrderSequence).
//
// # Transactions (KIP-98 with KIP-890's defence)
//
// A transactional data batch (attribute bit 4) of a producer without an
// ongoing transaction begins one at its first offset; a marker (a control
// batch, bit 5, whose one record says commit or abort, see record) ends
// it. Markers carry the producer's bumped epoch (KIP-890: the coordinator
// bumps it at every transaction end), so Apply of a marker sets the
// producer's epoch, and a changed epoch drops its cached batches: the
// next transaction's batches start at sequence 0, and a delayed batch of
// the ended transaction carries an older epoch, which Check fences. A
// Kafka client before KIP-890 part 2 keeps its epoch across transactions:
// its markers carry that same epoch, the cache stays, and its next
// transaction's sequences continue (the caller's verification is then
// what refuses a delayed batch). An
// abort marker records an AbortedTxn (producer id, first offset, the
// marker's offset, the LSO after it). A marker for a producer without an
// ongoing transaction (a retried marker) ends nothing but still sets the
// epochs.
//
//   - CheckTransactional checks a transactional batch: an older epoch is
//     fenced (ErrProducerFenced) first; then the caller's verification
//     (that the coordinator has the partition in the producer's current
//     transaction; asked and cached by the caller) must be true, else
//     ErrTransactionNotVerified; then the sequence rules above.
//   - Check of a non-transactional batch from a producer with an ongoing
//     transaction is ErrInvalidTxnState (after the fencing rule).
//   - CheckMarker checks a marker from the coordinator: an older producer
//     epoch is ErrProducerFenced, an older coordinator epoch than the
//     producer's last marker ErrCoordinatorFenced. Client batches with the
//     control bit never reach Check or CheckMarker; the caller refuses them.
//   - FirstUnstableOffset is the first offset of the oldest ongoing
//     transaction (the partition's LSO is at most it and the HW);
//     OngoingTransactions lists them.
//   - AbortedTransactions(from, to) returns the aborted transactions
//     overlapping [from, to), for a read_committed fetch (stopping, as
//     Kafka's fetch does, at the first whose LastStableOffset reaches to:
//     every later one began at or after it); EncodeAbortedIndex and
//     DecodeAbortedIndex are their format for one tiered segment's
//     .txnindex object (see the functions); DropAbortedBelow
//     forgets those whose marker lies below an offset, to keep the list
//     bounded once the caller keeps them elsewhere (a tiered segment's
//     index) or no longer has their records (below the log start).
//   - Expire never drops a producer with an ongoing transaction.
//
// Check changes nothing. Apply records a batch once it is in the log: on
// the leader after its append, on followers after they replicate it, and
// when a log is replayed. Apply does not validate; the log is the truth, and
// a batch whose epoch differs from the producer's starts its entry afresh.
// So the state is a function of the log (plus expiry), every replica holds
// the same state for the same log, and it survives a leader change.
//
// Invariants: every entry holds 0..MaxCachedBatches batches, oldest first,
// all with the entry's epoch and producer id, and at least one unless a
// marker set the epoch; every batch applied lies below Offset; the
// ongoing transactions are exactly the entries with a TxnFirstOffset, and
// the aborted ones are ordered by marker offset.
//
// # Wiring (the partition replica's side, dataplane/partition)
//
// The replica applies data batches from their headers (FromHeader) and
// markers with their control record (FromBatch); Rebuild applies
// FromBatch to every batch.
//
// Check, Append and Apply of one batch run under the replica's lock, and
// Apply runs before the next Check, so two in-flight batches of a producer
// cannot both pass. The leader applies FromHeader(record.Batch(buf).Header())
// after Append (which stamped the base offset into buf); a follower applies
// every batch it appended. Applying non-idempotent batches too (FromHeader
// returns their offsets with ok false) keeps Offset at the LEO, so a Clone
// can be snapshotted at its own Offset. After a log truncation the
// in-memory state is ahead of the log: Rebuild it (which also removes the
// snapshots above the new LEO). After a log Reset, DeleteAbove(dir, -1) and start from New.
// Snapshots are taken at a batch boundary (the replica writes one after
// each segment roll, within a second, and at close, with the LEO as
// offset), and DeleteBelow(dir, log start offset) after retention. The
// files of one dir must not be changed concurrently.
//
// # Snapshot format (version 2)
//
// A snapshot file is named by its offset in 20 digits, %020d.snapshot, and
// holds the state of the log below that offset: every batch below it is
// reflected. All integers are big-endian:
//
//	offset size field
//	     0    1 version         2
//	     1    8 offset          int64, the snapshot's next offset
//	     9    4 producer count  uint32
//	    13    - producers       ascending by producer id, each:
//	                 0  8 producer id        int64, >= 0
//	                 8  2 epoch              int16
//	                10  4 coordinator epoch  int32, of the last marker, -1 none
//	                14  8 txn first offset   int64, the ongoing transaction's
//	                                         first offset, below the snapshot
//	                                         offset; -1 none
//	                22  8 last timestamp     int64, ms, newest batch or marker
//	                30  1 batch count        0..5
//	                31  - batches            oldest first, 32 bytes each:
//	                         0 4 base sequence  int32
//	                         4 4 last sequence  int32
//	                         8 8 first offset   int64
//	                        16 8 last offset    int64, below the snapshot offset
//	                        24 8 max timestamp  int64, ms
//	     -    4 aborted count   uint32
//	     -    - aborted         ascending by last offset, 32 bytes each:
//	                         0 8 producer id         int64, >= 0
//	                         8 8 first offset        int64, >= 0
//	                        16 8 last offset         int64, the marker: above
//	                                                 the first, below the
//	                                                 snapshot offset
//	                        24 8 last stable offset  int64, 0..last offset+1
//	 end-4    4 crc             CRC32C (Castagnoli) of bytes [0, end-4)
//
// The aborted transactions are those not dropped by DropAbortedBelow, so
// a rebuild from a snapshot reproduces them until the partition keeps
// them elsewhere.
//
// Version 1 (written before transactions) still loads: its producer
// entries are 11 bytes (producer id, epoch, batch count 1..5) followed by
// the batches, with no aborted section; they load without transactions,
// coordinator epoch -1 and the newest batch's timestamp as last
// timestamp. The encoding is canonical: one state has exactly one
// encoding (in the newest version). A new version gets a new version
// byte; a reader that meets an unknown version treats the file as
// unusable, which costs only a longer replay.
//
// # Rebuild
//
// Rebuild takes the LEO, removes the snapshots above it, loads the newest
// snapshot at or below it (an unusable one is removed and the next older one
// tried; none gives an empty state at offset 0), then reads the log with
// 1 MiB reads from max(snapshot offset, log start offset) to the LEO and
// applies every batch through FromBatch (markers included, so ongoing and
// aborted transactions come back; a marker that does not decode fails the
// rebuild; a retention pass that moves the log start meanwhile makes it
// skip ahead).
// Batches before the start
// (a read returns the whole batch holding its offset) are skipped.
// Producers whose batches were deleted by retention before any snapshot
// covered them are unknown, as in Kafka (and so is a transaction whose
// first batches were deleted: its marker then ends nothing); expiry is
// left to the caller.
// Rebuild also returns the offset of the snapshot it started from, so the
// caller knows where the next rebuild would start. With snapshots at every
// roll (as the replica takes them) a rebuild reads at most the active
// segment, and the one before it between a roll and its snapshot: the
// cost of a restart after a crash, and of every truncation, which
// rebuilds too.
//
// Nothing here starts goroutines or reads a clock; State is not safe for
// concurrent use.
package producerstate
