package log

import (
	"github.com/sluicemq/sluice/record"

	"errors"
	"testing"
)

// FuzzIndexDecode feeds arbitrary bytes to the index file readers: they
// must not panic, and what they accept must satisfy the lookup invariants.
func FuzzIndexDecode(f *testing.F) {
	f.Add(encodeIndex([]indexEntry{{0, 0}, {3, 4096}, {9, 9000}}, 10000), int64(10000))
	f.Add(encodeTimeIndex([]timeEntry{{100, 0}, {200, 3}}, 500), int64(500))
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, data []byte, logSize int64) {
		if idx, err := decodeIndex(data, logSize); err == nil {
			for i, e := range idx {
				if int64(e.pos) >= logSize || (i > 0 && (e.rel <= idx[i-1].rel || e.pos <= idx[i-1].pos)) {
					t.Fatalf("accepted bad entry %d: %+v", i, e)
				}
			}
			if got := encodeIndex(idx, logSize); string(got) != string(data) {
				t.Fatal("index does not re-encode to its input")
			}
		} else if !errors.Is(err, record.ErrCorrupt) {
			t.Fatalf("unclassified error %v", err)
		}
		if tidx, err := decodeTimeIndex(data, logSize); err == nil {
			for i, e := range tidx {
				if i > 0 && (e.ts <= tidx[i-1].ts || e.rel <= tidx[i-1].rel) {
					t.Fatalf("accepted bad time entry %d: %+v", i, e)
				}
			}
		} else if !errors.Is(err, record.ErrCorrupt) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}
