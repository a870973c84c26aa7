// Package log stores one partition replica on local disk: a sequence of
// record batches in segment files, with sparse indexes, a leader-epoch cache,
// retention and crash recovery.
//
// Batches are in the format of package record, which this package stores
// and serves unchanged but for the base offset and leader epoch a leader
// stamps (and the CRC that covers the epoch).
//
// # Checks
//
// Every batch is checked (framing, header fields, CRC and, for a leader,
// its records) once on its way in and again whenever it is read back from
// a file: Append checks with ValidateLeaderBatch; AppendValidated takes a
// ValidBatch, the proof that ValidateLeaderBatch (or EncodeLeaderBatch)
// already ran, without checking again, so that a broker checks a produced
// batch once, where the request enters; AppendFollower checks each batch
// of the leader's bytes; Read and Open's recovery check what they read
// from disk.
//
// # Files
//
// A log is a directory. Each segment is named by its base offset in 20
// digits: 00000000000000000000.log holds the batches,
// 00000000000000000000.index a sparse offset index (an entry every
// Config.IndexIntervalBytes of log), 00000000000000000000.timeindex a time
// index (max timestamp so far → offset). Index files carry a trailer with the
// size of the .log they describe and a CRC32C; an index that does not match
// is rebuilt from the .log. leader-epoch-checkpoint holds the leader-epoch
// cache; clean-shutdown exists only between a Close and the next Open.
//
// Appends do not write the leader-epoch checkpoint (Kafka made the same
// move in KAFKA-15046): a batch that starts a new epoch only updates the
// cache in memory. The checkpoint is written (atomically: a temporary file,
// fsynced, renamed, the directory fsynced) when the cache must be durable:
// by a roll, after the sealed segment is fsynced and before the next
// segment's file is created, because Open loads a closed segment from its
// indexes without looking at its batches' epochs; by Close, before the
// clean-shutdown marker, because the clean Open does not scan the active
// segment either; by TruncateTo, Reset and retention when they drop
// entries; and by Open when the file holds entries the log no longer has.
// So the checkpoint misses at most the epochs that start in the active
// segment, and an Open after a crash, which checks every batch of the
// active segment, adds them back from the batches' leader epochs.
//
// # Open files
//
// A segment's .log file is opened through a FileCache (Config.Files; a
// broker shares one among all its logs): a reader, the writer or an fsync
// acquires it for the duration of the operation and releases it, and the
// cache closes the least recently used files nobody uses once more than
// its capacity are open, to reopen them at their next use. Index files are
// read into memory when a segment is loaded and written whole when it is
// sealed, so they are never held open. A file is closed only with all its
// writes fsynced (the cache fsyncs it first, and a failed fsync fails the
// log); with FlushOS this costs an fsync per active segment the cache
// closes. Readers hold structMu for reading while they use a segment, and
// deleting or cutting segments takes it for writing, so a reader never
// finds its segment gone; a removed segment's file, were it still in use,
// would close at its release and is never reopened. Without Config.Files
// a log has a cache of its own without a limit: one open file per segment.
//
// # Invariants
//
//   - Segments are contiguous: a segment's next offset is the next segment's
//     base offset. LogStartOffset is the first segment's base offset; LEO is
//     the active (last) segment's next offset. LogStartOffset <= LEO.
//   - Every segment except the active one was fsynced, with its indexes,
//     before the next one was created. Recovery after a crash therefore scans
//     only the active segment.
//   - Readers only see bytes below the published end of the active segment,
//     which only covers whole batches that were completely written.
//   - Leader-epoch cache: epochs and start offsets strictly increase, every
//     start offset is in [LogStartOffset, LEO). The checkpoint file is a
//     prefix of the cache; the entries it lacks start in the active segment.
//
// # Flush policies and what they promise after a crash
//
// Appends never fsync: they write and publish, and the caller makes the
// batches durable with MakeDurable after releasing its own locks, so a slow
// disk delays only the callers that wait for durability, never appends,
// reads or fetches. DurableOffset is the end of the durable prefix.
//
//   - FlushAlways: MakeDurable fsyncs, one fsync at a time per log, shared
//     by every caller that arrived while the previous one ran (group
//     commit). Every batch below DurableOffset survives a crash of the
//     process or of the machine (given a disk that honours fsync), except
//     when the damage is a corrupted last batch, which recovery cannot tell
//     from a torn write.
//   - FlushInterval: the log's FileCache fsyncs it every Config.FlushInterval
//     when it appended since (one goroutine for all the logs that share the
//     cache and the interval), and MakeDurable waits for that, so at most one interval (plus one fsync)
//     passes between an append and its durability. After a machine crash
//     the batches not yet below DurableOffset may be lost. A process crash
//     loses nothing the kernel accepted.
//   - FlushOS: the page cache decides; DurableOffset is the LEO and
//     MakeDurable returns at once. A process crash loses nothing that
//     Append accepted; a machine crash may lose any batch of the active
//     segment, and recovery truncates to the last valid batch.
//
// Rolled segments are fsynced at roll under every policy.
//
// In every policy recovery truncates a torn tail at the first batch that
// fails its checks, so nothing after a torn write is served. A CRC failure
// followed by valid batches is corruption, not a torn write: Open and Read
// return a *CorruptionError and never return the damaged bytes.
//
// # Goroutines and locks
//
// A Log has one writer: Append, AppendValidated, AppendFollower, TruncateTo, Reset,
// ApplyRetention and Close serialise on writeMu. Readers (Read,
// OffsetForTimestamp, ClosedSegments, OpenSegment, Sync, MakeDurable and
// the interval flusher) take structMu for reading and use an immutable view published
// through an atomic pointer; they never wait for Append, which does not take
// structMu. Operations that delete or shrink files (TruncateTo, Reset,
// retention, Close) take structMu for writing, so no file is removed or cut
// while a reader uses it. Lock order: writeMu, then syncMu, then structMu,
// then flushMu (MakeDurable takes syncMu without writeMu).
//
// With FlushInterval the log's FileCache flushes it from one goroutine per
// interval shared by all its logs (started with the first one's Open,
// stopped with the last one's Close), which runs at most 16 fsyncs at
// once. A FileCache runs one goroutine, only while it has files
// over its capacity to fsync before it closes them. Its mutex is held to
// open and close files and to count their users, never across a read, a
// write or an fsync.
package log
