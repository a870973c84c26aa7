package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
)

// The batch conversion at the Kafka listener's edge, three ways, for
// docs/design/kafka-batches.md: as built (the other format's CRC derived
// from the one the batch carries, O(log n)), recomputing the CRC over the
// whole batch (what a plain translation does), and a plain copy (the
// floor: what serving Kafka's layout from disk unchanged would cost the
// fetch path here, a copy into the response).
func benchBatch(b *testing.B, size int) []byte {
	b.Helper()
	var recs []Record
	for n := HeaderSize; n < size; n += 1024 + 16 {
		recs = append(recs, Record{OffsetDelta: int32(len(recs)), Value: bytes.Repeat([]byte{'x'}, 1024)})
	}
	batch, err := AppendBatch(nil, BatchHeader{ProducerID: -1, BaseSequence: -1}, recs)
	if err != nil {
		b.Fatal(err)
	}
	return batch
}

func BenchmarkKafkaFetchConversion(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 1 << 20} {
		batch := benchBatch(b, size)
		dst := make([]byte, 0, len(batch))
		b.Run(fmt.Sprintf("derived-crc/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				dst = AppendKafka(dst[:0], batch)
			}
		})
		b.Run(fmt.Sprintf("recomputed-crc/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				dst = append(dst[:0], batch...)
				epoch := binary.BigEndian.Uint32(dst[posLeaderEpoch:])
				binary.BigEndian.PutUint32(dst[posKafkaLeaderEpoch:], epoch)
				dst[posKafkaMagic] = byte(KafkaMagic)
				binary.BigEndian.PutUint32(dst[posKafkaCRC:], crc32.Checksum(dst[posAttributes:], castagnoli))
			}
		})
		b.Run(fmt.Sprintf("copy-only/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				dst = append(dst[:0], batch...)
			}
		})
	}
}

func BenchmarkKafkaProduceConversion(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 1 << 20} {
		kafka := AppendKafka(nil, benchBatch(b, size))
		buf := make([]byte, len(kafka))
		b.Run(fmt.Sprintf("derived-crc/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(kafka)))
			for b.Loop() {
				copy(buf, kafka) // FromKafka converts in place
				if _, err := FromKafka(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("recomputed-crc/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(kafka)))
			for b.Loop() {
				copy(buf, kafka)
				if crc32.Checksum(buf[posAttributes:], castagnoli) != binary.BigEndian.Uint32(buf[posKafkaCRC:]) {
					b.Fatal("crc")
				}
				epoch := binary.BigEndian.Uint32(buf[posKafkaLeaderEpoch:])
				buf[posMagic] = byte(Magic)
				binary.BigEndian.PutUint32(buf[posLeaderEpoch:], epoch)
				binary.BigEndian.PutUint32(buf[posCRC:], crc32.Checksum(buf[posMagic:], castagnoli))
			}
		})
		b.Run(fmt.Sprintf("copy-only/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(kafka)))
			for b.Loop() {
				copy(buf, kafka)
			}
		})
	}
}
