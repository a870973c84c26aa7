package compress

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/snappy"

	"github.com/sluicemq/sluice/record"
)

// FuzzDecompress feeds arbitrary bytes to every codec's decompressor (and to
// the undefined codec numbers): it must never panic, never return more than
// the limit, leave dst as it was on error, and refuse undefined codecs.
func FuzzDecompress(f *testing.F) {
	const limit = 1 << 16
	src := bytes.Repeat([]byte("fuzz me, fuzz me not. "), 100)
	for _, c := range codecs {
		z, err := Compress(c, nil, src)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(c), z)
		big, err := Compress(c, nil, make([]byte, limit+1))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(c), big)
	}
	f.Add(byte(record.CodecSnappy), xerialFrame(snappy.Encode(nil, src[:100]), snappy.Encode(nil, src[100:])))
	f.Add(byte(record.CodecSnappy), xerialFrame())
	f.Add(byte(5), []byte{1})
	f.Fuzz(func(t *testing.T, codec byte, data []byte) {
		c := record.Codec(codec & 7)
		out, err := Decompress(c, []byte("pre"), data, limit)
		switch {
		case c > record.CodecZstd:
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("codec %d: %v, want ErrUnsupported", c, err)
			}
		case err == nil && len(out)-3 > limit:
			t.Fatalf("codec %d: %d bytes out, limit %d", c, len(out)-3, limit)
		}
		if err != nil && string(out) != "pre" {
			t.Fatalf("codec %d: error %v with dst changed to %q", c, err, out)
		}
		if !bytes.HasPrefix(out, []byte("pre")) {
			t.Fatalf("codec %d: dst not kept", c)
		}
	})
}
