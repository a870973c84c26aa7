// Package compress implements the batch compression codecs of the Kafka
// record batch format: gzip (klauspost/compress/gzip), snappy
// (klauspost/compress/snappy), lz4 (pierrec/lz4, frame format) and zstd
// (klauspost/compress/zstd). It serves the Go SDK (which compresses and
// decompresses batches) and the broker (which checks the records of
// compressed batches it is asked to write, including those of Kafka clients,
// and decodes them for clients that fetch records rather than raw batches).
//
// Snappy is decompressed from either framing Kafka clients write: the xerial
// framing of Kafka's Java client (a "\x82SNAPPY\x00" header, then chunks of a
// big-endian length and a raw snappy block) or one raw snappy block. It is
// compressed to one raw snappy block, which every Kafka client reads.
//
// Decompression is bounded: a batch whose records expand beyond the given
// limit is refused with ErrTooLarge, so a small hostile batch cannot make a
// broker or a consumer allocate without bound.
package compress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/sluicemq/sluice/record"
)

// ErrTooLarge: the records decompress to more than the allowed size.
var ErrTooLarge = errors.New("decompressed records exceed the size limit")

// ErrUnsupported: a codec number the batch format does not define (5 to 7:
// the attribute bits hold 0 none, 1 gzip, 2 snappy, 3 lz4 and 4 zstd).
var ErrUnsupported = errors.New("unsupported compression codec")

// DefaultLimit bounds decompressed records when the caller has no better
// bound: 64 MiB.
const DefaultLimit = 64 << 20

var (
	zstdEnc = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	})
	zstdDec = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(DefaultLimit))
		if err != nil {
			panic(err)
		}
		return d
	})
	lz4Writers = sync.Pool{New: func() any { return lz4.NewWriter(nil) }}
	lz4Readers = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	// A zero gzip.Reader is ready for Reset.
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	gzipReaders = sync.Pool{New: func() any { return new(gzip.Reader) }}
)

// ParseCodec maps a codec name (none, gzip, snappy, lz4, zstd) to its
// record.Codec.
func ParseCodec(name string) (record.Codec, error) {
	switch name {
	case "", "none":
		return record.CodecNone, nil
	case "gzip":
		return record.CodecGzip, nil
	case "snappy":
		return record.CodecSnappy, nil
	case "lz4":
		return record.CodecLZ4, nil
	case "zstd":
		return record.CodecZstd, nil
	}
	return 0, fmt.Errorf("compression %q: choose none, gzip, snappy, lz4 or zstd", name)
}

// Compress appends src compressed with c to dst.
func Compress(c record.Codec, dst, src []byte) ([]byte, error) {
	switch c {
	case record.CodecNone:
		return append(dst, src...), nil
	case record.CodecZstd:
		return zstdEnc().EncodeAll(src, dst), nil
	case record.CodecGzip:
		buf := bytes.NewBuffer(dst)
		w := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(w)
		w.Reset(buf)
		if _, err := w.Write(src); err != nil {
			return dst, err
		}
		if err := w.Close(); err != nil {
			return dst, err
		}
		return buf.Bytes(), nil
	case record.CodecSnappy:
		return compressSnappy(dst, src)
	case record.CodecLZ4:
		buf := bytes.NewBuffer(dst)
		w := lz4Writers.Get().(*lz4.Writer)
		defer lz4Writers.Put(w)
		w.Reset(buf)
		if _, err := w.Write(src); err != nil {
			return dst, err
		}
		if err := w.Close(); err != nil {
			return dst, err
		}
		return buf.Bytes(), nil
	}
	return dst, fmt.Errorf("codec %d: %w", c, ErrUnsupported)
}

// Decompress appends src decompressed with c to dst, refusing output beyond
// limit bytes (0 means DefaultLimit).
func Decompress(c record.Codec, dst, src []byte, limit int) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	switch c {
	case record.CodecNone:
		if len(src) > limit {
			return dst, ErrTooLarge
		}
		return append(dst, src...), nil
	case record.CodecZstd:
		start := len(dst)
		out, err := zstdDec().DecodeAll(src, dst)
		if err != nil {
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
				return dst, ErrTooLarge
			}
			return dst, fmt.Errorf("zstd: %w", err)
		}
		if len(out)-start > limit {
			return dst, ErrTooLarge
		}
		return out, nil
	case record.CodecGzip:
		r := gzipReaders.Get().(*gzip.Reader)
		defer gzipReaders.Put(r)
		if err := r.Reset(bytes.NewReader(src)); err != nil {
			return dst, fmt.Errorf("gzip: %w", err)
		}
		return readAtMost(dst, r, limit, "gzip")
	case record.CodecSnappy:
		return decompressSnappy(dst, src, limit)
	case record.CodecLZ4:
		r := lz4Readers.Get().(*lz4.Reader)
		defer lz4Readers.Put(r)
		r.Reset(bytes.NewReader(src))
		return readAtMost(dst, r, limit, "lz4")
	}
	return dst, fmt.Errorf("codec %d: %w", c, ErrUnsupported)
}

// readAtMost appends what r decodes to dst, refusing more than limit
// bytes (ErrTooLarge, reading at most one byte past it); errors are named
// after codec.
func readAtMost(dst []byte, r io.Reader, limit int, codec string) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	n, err := io.Copy(buf, io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return dst, fmt.Errorf("%s: %w", codec, err)
	}
	if n > int64(limit) {
		return dst, ErrTooLarge
	}
	return buf.Bytes(), nil
}

// CompressBatch appends to dst batch b (uncompressed) with its records
// compressed by c. With CodecNone it appends b unchanged.
func CompressBatch(dst []byte, b record.Batch, c record.Codec) ([]byte, error) {
	if got := b.Header().Attributes.Codec(); got != record.CodecNone {
		return dst, fmt.Errorf("compress batch: already compressed with codec %d", got)
	}
	if c == record.CodecNone {
		return append(dst, b...), nil
	}
	return record.RecodeBatch(dst, b, c, func(dst, src []byte) ([]byte, error) { return Compress(c, dst, src) })
}

// DecompressBatch returns b with its records decompressed, appended to dst
// (an uncompressed b is returned as is, without copying). limit bounds the
// decompressed records (0: DefaultLimit).
func DecompressBatch(dst []byte, b record.Batch, limit int) (record.Batch, error) {
	c := b.Header().Attributes.Codec()
	if c == record.CodecNone {
		return b, nil
	}
	out, err := record.RecodeBatch(dst, b, record.CodecNone, func(dst, src []byte) ([]byte, error) { return Decompress(c, dst, src, limit) })
	if err != nil {
		return nil, err
	}
	return record.Batch(out[len(dst):]), nil
}

// xerialMagic opens a snappy payload in the xerial framing (snappy-java's
// SnappyOutputStream, used by Kafka's Java client); a 4-byte version and a
// 4-byte minimum compatible version follow it, then chunks, each a
// big-endian int32 length and a raw snappy block of that length.
const (
	xerialMagic     = "\x82SNAPPY\x00"
	xerialHeaderLen = len(xerialMagic) + 8
)

// snappyMaxRatio bounds how much a snappy block expands: no element yields
// more per input byte than a 3-byte copy of 64 bytes, so a valid block of n
// bytes decodes to less than 22n. A block whose header claims more is
// corrupt, and is refused before its output is allocated.
const snappyMaxRatio = 22

// compressSnappy appends src as one raw snappy block to dst (what librdkafka,
// franz-go, sarama and the Java client's xerial reader all accept).
func compressSnappy(dst, src []byte) ([]byte, error) {
	m := snappy.MaxEncodedLen(len(src))
	if m < 0 {
		return dst, fmt.Errorf("snappy: %d bytes: too large for a snappy block", len(src))
	}
	start := len(dst)
	dst = slices.Grow(dst, m)
	// Encode writes into the free capacity when it is large enough (it is);
	// appending its result copies only if it did not.
	enc := snappy.Encode(dst[start:start+m], src)
	return append(dst, enc...), nil
}

// decompressSnappy appends the snappy payload src, xerial-framed or one raw
// block, decoded to dst, refusing more than limit bytes of output. It reads
// the framing and the decoded length of every block first, so it allocates
// once, for at most limit bytes of output, and only when the lengths are
// consistent.
func decompressSnappy(dst, src []byte, limit int) ([]byte, error) {
	total := 0
	err := snappyBlocks(src, func(block []byte) error {
		n, err := snappy.DecodedLen(block)
		switch {
		case errors.Is(err, snappy.ErrTooLarge):
			return ErrTooLarge
		case err != nil:
			return fmt.Errorf("snappy: %w", err)
		case n > limit-total:
			return ErrTooLarge
		case n/snappyMaxRatio >= len(block):
			return fmt.Errorf("snappy: a %d-byte block claims %d bytes: %w", len(block), n, snappy.ErrCorrupt)
		}
		total += n
		return nil
	})
	if err != nil {
		return dst, err
	}
	start := len(dst)
	out := slices.Grow(dst, total)
	err = snappyBlocks(src, func(block []byte) error {
		n, _ := snappy.DecodedLen(block) // checked above
		// DecodeStrict, not Decode: Decode also accepts the s2 extensions
		// of the snappy format, which Kafka's other clients cannot decode.
		// The exact-length destination has room, so it decodes in place;
		// appending its result copies only if it did not.
		dec, err := snappy.DecodeStrict(out[len(out):len(out)+n], block)
		if err != nil {
			return fmt.Errorf("snappy: %w", err)
		}
		out = append(out, dec...)
		return nil
	})
	if err != nil {
		return dst[:start], err
	}
	return out, nil
}

// snappyBlocks calls f with each raw snappy block of src: the chunks of a
// xerial-framed payload, or src itself when it does not open with the xerial
// magic. It refuses framing that is truncated or whose chunk lengths exceed
// what remains.
func snappyBlocks(src []byte, f func(block []byte) error) error {
	if !bytes.HasPrefix(src, []byte(xerialMagic)) {
		return f(src)
	}
	if len(src) < xerialHeaderLen {
		return fmt.Errorf("snappy: xerial header of %d bytes, want %d: %w", len(src), xerialHeaderLen, snappy.ErrCorrupt)
	}
	for rest := src[xerialHeaderLen:]; len(rest) > 0; {
		if len(rest) < 4 {
			return fmt.Errorf("snappy: xerial chunk length truncated to %d bytes: %w", len(rest), snappy.ErrCorrupt)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return fmt.Errorf("snappy: xerial chunk of %d bytes, %d remain: %w", n, len(rest), snappy.ErrCorrupt)
		}
		if err := f(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}
