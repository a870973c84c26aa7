package record

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRC32CCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 5, 7, 63, 64, 1000, 4096, 65537} {
		a := make([]byte, r.IntN(9))
		b := make([]byte, n)
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		ca, cb := crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli)
		cab := crc32.Checksum(append(append([]byte{}, a...), b...), castagnoli)
		if got := crc32cCombine(ca, cb, n); got != cab {
			t.Fatalf("combine len(a)=%d len(b)=%d: %#x, want %#x", len(a), n, got, cab)
		}
		if got := crc32cUncombine(cab, ca, n); got != cb {
			t.Fatalf("uncombine len(a)=%d len(b)=%d: %#x, want %#x", len(a), n, got, cb)
		}
	}
}

// kafkaBatch builds a Kafka RecordBatch v2 from a batch of this package:
// the layout written out field by field from Kafka's documentation, its
// CRC computed over [21, end) directly.
func kafkaBatch(t *testing.T, sluice []byte) []byte {
	t.Helper()
	k := bytes.Clone(sluice)
	epoch := binary.BigEndian.Uint32(sluice[posLeaderEpoch:])
	binary.BigEndian.PutUint32(k[12:], epoch)
	k[16] = 2
	binary.BigEndian.PutUint32(k[17:], crc32.Checksum(k[21:], castagnoli))
	return k
}

func testBatches(t *testing.T) []byte {
	t.Helper()
	var out []byte
	for i, n := range []int{1, 3, 50} {
		recs := make([]Record, n)
		for j := range recs {
			recs[j] = Record{OffsetDelta: int32(j), TimestampDelta: int64(j), Key: []byte{byte(j)}, Value: bytes.Repeat([]byte{byte(i)}, 10*j),
				Headers: []RecordHeader{{Key: []byte("h"), Value: []byte("v")}}}
		}
		b, err := AppendBatch(nil, BatchHeader{FirstTimestamp: 1700000000000, ProducerID: 7, ProducerEpoch: 1, BaseSequence: int32(10 * i)}, recs)
		if err != nil {
			t.Fatal(err)
		}
		Batch(b).SetLeader(int64(100*i), int32(3+i))
		out = append(out, b...)
	}
	return out
}

func TestKafkaRoundTrip(t *testing.T) {
	sluice := testBatches(t)
	var kafka []byte
	for rest := sluice; len(rest) > 0; {
		n := int(Size(rest))
		kafka = append(kafka, kafkaBatch(t, rest[:n])...)
		rest = rest[n:]
	}
	if got := AppendKafka(nil, sluice); !bytes.Equal(got, kafka) {
		t.Fatal("AppendKafka differs from Kafka's layout written out by hand")
	}
	in := bytes.Clone(kafka)
	n, err := FromKafka(in)
	if err != nil || n != 3 {
		t.Fatalf("FromKafka: %d, %v", n, err)
	}
	if !bytes.Equal(in, sluice) {
		t.Fatal("FromKafka did not give back the batches")
	}
	for rest := in; len(rest) > 0; {
		b, r, err := ReadBatch(rest)
		if err != nil {
			t.Fatalf("converted batch does not read: %v", err)
		}
		_ = b
		rest = r
	}
	// A torn tail is passed through as it is.
	first := int(Size(sluice)) + int(Size(sluice[Size(sluice):]))
	torn := sluice[:len(sluice)-5]
	got := AppendKafka(nil, torn)
	if !bytes.Equal(got[:first], kafka[:first]) || !bytes.Equal(got[first:], torn[first:]) {
		t.Fatal("a torn last batch was not passed through")
	}
}

func TestFromKafkaRefuses(t *testing.T) {
	sluice := testBatches(t)
	kafka := AppendKafka(nil, sluice)
	bad := bytes.Clone(kafka)
	bad[16] = 1 // a message set v1
	if _, err := FromKafka(bad); err == nil {
		t.Fatal("magic 1 accepted")
	}
	if _, err := FromKafka(bytes.Clone(kafka[:len(kafka)-1])); err == nil {
		t.Fatal("a truncated batch accepted")
	}
	// A wrong Kafka CRC gives a wrong Sluice CRC: ReadBatch refuses it.
	bad = bytes.Clone(kafka)
	bad[40] ^= 1
	if _, err := FromKafka(bad); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadBatch(bad); err == nil {
		t.Fatal("a batch whose Kafka CRC was wrong reads after conversion")
	}
}
