// Package compress implements the batch compression codecs Sluice supports,
// zstd (klauspost/compress) and lz4 (pierrec/lz4, frame format), for the Go
// SDK (which compresses and decompresses batches) and the broker (which
// checks the records of compressed batches it is asked to write, and decodes
// them for clients that fetch records rather than raw batches).
//
// Decompression is bounded: a batch whose records expand beyond the given
// limit is refused with ErrTooLarge, so a small hostile batch cannot make a
// broker or a consumer allocate without bound.
package compress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/sluicemq/sluice/record"
)

// ErrTooLarge: the records decompress to more than the allowed size.
var ErrTooLarge = errors.New("decompressed records exceed the size limit")

// ErrUnsupported: a codec this build does not implement (gzip, snappy).
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
)

// ParseCodec maps a codec name (none, zstd, lz4) to its record.Codec.
func ParseCodec(name string) (record.Codec, error) {
	switch name {
	case "", "none":
		return record.CodecNone, nil
	case "zstd":
		return record.CodecZstd, nil
	case "lz4":
		return record.CodecLZ4, nil
	}
	return 0, fmt.Errorf("compression %q: choose none, zstd or lz4", name)
}

// Compress appends src compressed with c to dst.
func Compress(c record.Codec, dst, src []byte) ([]byte, error) {
	switch c {
	case record.CodecNone:
		return append(dst, src...), nil
	case record.CodecZstd:
		return zstdEnc().EncodeAll(src, dst), nil
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
	case record.CodecLZ4:
		r := lz4Readers.Get().(*lz4.Reader)
		defer lz4Readers.Put(r)
		r.Reset(bytes.NewReader(src))
		buf := bytes.NewBuffer(dst)
		n, err := io.Copy(buf, io.LimitReader(r, int64(limit)+1))
		if err != nil {
			return dst, fmt.Errorf("lz4: %w", err)
		}
		if n > int64(limit) {
			return dst, ErrTooLarge
		}
		return buf.Bytes(), nil
	}
	return dst, fmt.Errorf("codec %d: %w", c, ErrUnsupported)
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
