package record

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzBatchDecode feeds arbitrary bytes to the batch and record decoders:
// they must never panic, must classify every failure, and a batch they
// accept must re-encode to the same record contents.
func FuzzBatchDecode(f *testing.F) {
	enc, err := AppendBatch(nil, BatchHeader{BaseOffset: 5, LeaderEpoch: 1, FirstTimestamp: 1000}, testRecords())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc, false)
	f.Add(enc[:HeaderSize], false)
	two, _ := AppendBatch(append([]byte(nil), enc...), BatchHeader{BaseOffset: 8}, []Record{{Value: []byte("x")}})
	f.Add(two, true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC && len(data) >= HeaderSize {
			// Let the fuzzer past the CRC to reach the header and record checks.
			data = append([]byte(nil), data...)
			if n := int(int32(binary.BigEndian.Uint32(data[posLength:]))) + lengthPrefix; n >= HeaderSize && n <= len(data) {
				setCRC(data[:n])
			}
		}
		var it RecordIter
		for rest := data; len(rest) > 0; {
			b, r, err := ReadBatch(rest)
			if err != nil {
				if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedMagic) {
					t.Fatalf("unclassified error %v", err)
				}
				return
			}
			if len(b) > len(rest) || len(r) != len(rest)-len(b) {
				t.Fatalf("batch of %d bytes from %d", len(b), len(rest))
			}
			rest = r
			h := b.Header()
			if err := it.Reset(b); err != nil {
				if !errors.Is(err, ErrCompressed) {
					t.Fatalf("reset: %v", err)
				}
				continue
			}
			var recs []Record
			for it.Next() {
				rec := *it.Record()
				rec.Headers = append([]RecordHeader(nil), rec.Headers...)
				recs = append(recs, rec)
			}
			if it.Err() != nil {
				if !errors.Is(it.Err(), ErrCorrupt) {
					t.Fatalf("records: unclassified error %v", it.Err())
				}
				continue
			}
			if int32(len(recs)) != h.RecordCount {
				t.Fatalf("%d records, header says %d", len(recs), h.RecordCount)
			}
			if len(recs) == 0 || h.Attributes&^attrKnown != 0 || recs[len(recs)-1].OffsetDelta != h.LastOffsetDelta {
				continue
			}
			// Re-encode and decode again: the records must come back equal.
			re, err := AppendBatch(nil, h, recs)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			b2, _, err := ReadBatch(re)
			if err != nil {
				t.Fatalf("decode re-encoded: %v", err)
			}
			it2, err := b2.Records()
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; it2.Next(); i++ {
				got := it2.Record()
				if string(got.Key) != string(recs[i].Key) || string(got.Value) != string(recs[i].Value) ||
					(got.Key == nil) != (recs[i].Key == nil) || (got.Value == nil) != (recs[i].Value == nil) ||
					got.OffsetDelta != recs[i].OffsetDelta || got.TimestampDelta != recs[i].TimestampDelta ||
					len(got.Headers) != len(recs[i].Headers) {
					t.Fatalf("record %d changed in round trip", i)
				}
			}
			if it2.Err() != nil {
				t.Fatalf("re-encoded records: %v", it2.Err())
			}
		}
	})
}
