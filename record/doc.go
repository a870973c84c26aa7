// Package record is the record batch format: how records travel between
// producers, brokers, followers, consumers and the object store, and how
// they rest in segment files. It is a leaf package: the SDK, the brokers'
// log, compression and tiered storage all share it, and it imports nothing
// of Sluice.
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
// (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 the timestamp type
// (set: LogAppendTime, the max timestamp is every record's), bit 4
// transactional, bit 5 control batch; other bits are zero. This package carries compressed batches unchanged but only decodes the
// records of uncompressed ones (internal/compress recodes them).
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
// # Control records (transaction markers)
//
// A control batch (attributes Control|Transactional, the producer's id and
// epoch, base sequence -1) holds one control record, in Kafka's format
// (version 0), big-endian:
//
//	key:   version int16 (0), type int16 (0 abort, 1 commit)
//	value: version int16 (0), coordinator epoch int32
//
// MarkerBatch builds one, ReadControlRecord and ParseControlRecord decode
// it (ErrInvalidControlRecord on anything else, never a panic).
package record
