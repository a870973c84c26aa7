// Package log stores one partition replica on local disk: a sequence of
// record batches in segment files, with sparse indexes, a leader-epoch cache,
// retention and crash recovery.
//
// # Batch format (magic 1)
//
// Records travel and rest in batches. All integers are big-endian; the
// layout never changes without a new magic byte. A batch is:
//
//	offset size field
//	     0    8 base offset        int64, offset of the first record
//	     8    4 length             int32, bytes after this field (total size - 12)
//	    12    4 crc                uint32, CRC32C (Castagnoli) of bytes [16, end)
//	    16    1 magic              int8, 1
//	    17    4 leader epoch       int32, epoch of the leader that appended it
//	    21    2 attributes         int16, see below
//	    23    4 last offset delta  int32, last offset - base offset
//	    27    8 first timestamp    int64, ms since the Unix epoch
//	    35    8 max timestamp      int64, largest record timestamp
//	    43    8 producer id        int64, -1 without idempotence
//	    51    2 producer epoch     int16
//	    53    4 base sequence      int32
//	    57    4 record count       int32
//	    61    - records            record count records, possibly compressed
//
// Attributes: bits 0-2 the compression codec of the records section
// (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 reserved for the
// timestamp type, bit 4 transactional, bit 5 control batch; other bits are
// zero. This package stores and serves compressed batches unchanged but only
// decodes the records of uncompressed ones.
//
// The base offset is outside the CRC so that a leader can assign it; it is
// checked instead by offset continuity (every batch starts one past the last
// offset of the batch before it). The leader epoch is inside the CRC: a
// leader stamps the epoch and recomputes the CRC once, followers append the
// leader's bytes unchanged, so every replica's log is byte-identical.
//
// Each record is (varint = zigzag varint as in encoding/binary.AppendVarint):
//
//	length          varint, bytes of the rest of the record
//	attributes      int8, zero
//	timestamp delta varint, record timestamp - first timestamp
//	offset delta    varint, record offset - base offset
//	key length      varint, -1 for a null key
//	key             bytes
//	value length    varint, -1 for a null value
//	value           bytes
//	header count    varint
//	headers         header count times: key length varint, key,
//	                value length varint (-1 null), value
//
// Decoding checks every length against the bytes that remain, never panics,
// and allocates at most the reusable header slice of a record (bounded by the
// input size) on any input.
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
//     start offset is in [LogStartOffset, LEO).
//
// # Flush policies and what they promise after a crash
//
//   - FlushAlways: Append fsyncs the segment before it returns. Every batch
//     whose Append returned nil survives a crash of the process or of the
//     machine (given a disk that honours fsync), except when the damage is a
//     corrupted last batch, which recovery cannot tell from a torn write.
//   - FlushInterval: a background goroutine fsyncs every Config.FlushInterval
//     (group commit). After a machine crash the batches appended in the last
//     interval (plus one fsync time) may be lost; FlushedOffset and
//     WaitFlushed tell which batches are safe. A process crash loses nothing
//     the kernel accepted.
//   - FlushOS: the page cache decides. A process crash loses nothing that
//     Append accepted; a machine crash may lose any batch of the active
//     segment, and recovery truncates to the last valid batch. Rolled
//     segments are always fsynced at roll.
//
// In every policy recovery truncates a torn tail at the first batch that
// fails its checks, so nothing after a torn write is served. A CRC failure
// followed by valid batches is corruption, not a torn write: Open and Read
// return a *CorruptionError and never return the damaged bytes.
//
// # Goroutines and locks
//
// A Log has one writer: Append, AppendFollower, TruncateTo, Reset,
// ApplyRetention and Close serialise on writeMu. Readers (Read,
// OffsetForTimestamp, ClosedSegments, OpenSegment, Sync and the interval
// flusher) take structMu for reading and use an immutable view published
// through an atomic pointer; they never wait for Append, which does not take
// structMu. Operations that delete or shrink files (TruncateTo, Reset,
// retention, Close) take structMu for writing, so no file is removed or cut
// while a reader uses it. Lock order: writeMu, then structMu, then flushMu.
//
// With FlushInterval the Log owns one flusher goroutine, started by Open and
// stopped by Close.
package log
