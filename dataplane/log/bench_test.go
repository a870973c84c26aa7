package log

import (
	"context"
	"github.com/sluicemq/sluice/record"

	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchBatch is a batch of 1 KiB records of about batchBytes in all.
func benchBatch(b *testing.B, batchBytes int) []byte {
	n := batchBytes / 1024
	recs := make([]record.Record, n)
	for i := range recs {
		v := make([]byte, 1024-8) // record framing brings it to ~1 KiB
		for j := range v {
			v[j] = byte(i*31 + j)
		}
		recs[i] = record.Record{OffsetDelta: int32(i), Value: v}
	}
	enc, err := record.AppendBatch(nil, record.BatchHeader{}, recs)
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

// BenchmarkLogAppend measures leader appends (impl=log) next to a plain
// file written with the same bytes (impl=raw: os.File.Write, plus Sync for
// flush=always), in the same run and order, so page-cache writeback affects
// both alike. Compare with benchstat, e.g.
//
//	go test -run '^$' -bench LogAppend -count 6 ./dataplane/log/ > a.txt
//	benchstat -col /impl a.txt
func BenchmarkLogAppend(b *testing.B) {
	for _, size := range []int{16 << 10, 256 << 10} {
		for _, p := range []FlushPolicy{FlushOS, FlushAlways} {
			for _, impl := range []string{"log", "raw"} {
				b.Run(fmt.Sprintf("batch=%dKiB/flush=%s/impl=%s", size>>10, p, impl), func(b *testing.B) {
					batch := benchBatch(b, size)
					b.SetBytes(int64(len(batch)))
					if impl == "raw" {
						benchRaw(b, batch, p == FlushAlways)
						return
					}
					l, err := Open(b.TempDir(), Config{Flush: p})
					if err != nil {
						b.Fatal(err)
					}
					defer l.Close()
					b.ResetTimer()
					for b.Loop() {
						_, leo, err := l.Append(batch, 0)
						if err == nil {
							err = l.MakeDurable(context.Background(), leo)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
				})
			}
		}
	}
}

func benchRaw(b *testing.B, batch []byte, sync bool) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.Write(batch); err != nil {
			b.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
}

// BenchmarkLogRead reads a 64 MiB log sequentially in 1 MiB fetches.
func BenchmarkLogRead(b *testing.B) {
	batch := benchBatch(b, 16<<10)
	l, err := Open(b.TempDir(), Config{Flush: FlushOS, SegmentBytes: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for range (64 << 20) / len(batch) {
		if _, _, err := l.Append(batch, 0); err != nil {
			b.Fatal(err)
		}
	}
	off := int64(0)
	var n int64
	b.ResetTimer()
	for b.Loop() {
		data, err := l.Read(off, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		n += int64(len(data))
		if len(data) == 0 {
			off = 0
			continue
		}
		last, _, _ := record.ReadBatch(data[len(data)-len(batch):])
		off = last.LastOffset() + 1
	}
	b.SetBytes(n / int64(b.N))
}

// BenchmarkAppendFileCache appends a 4 KiB batch to each of 64 logs in
// turn (round-robin, as a producer spreads over partitions) with the
// logs' files in a FileCache of capacity files: at least the logs' count
// (every active segment stays open) or fewer (every append reopens a
// file, and with flush=os the cache fsyncs each file it closes). Compare
// e.g.
//
//	go test -run '^$' -bench AppendFileCache -count 6 ./dataplane/log/ > a.txt
//	benchstat -col /files a.txt
func BenchmarkAppendFileCache(b *testing.B) {
	const logs = 64
	for _, p := range []FlushPolicy{FlushAlways, FlushOS} {
		for _, capacity := range []int{0, logs, logs / 4} {
			name := fmt.Sprint(capacity)
			if capacity == 0 {
				name = "unlimited"
			}
			b.Run(fmt.Sprintf("flush=%s/files=%s", p, name), func(b *testing.B) {
				batch := benchBatch(b, 4<<10)
				b.SetBytes(int64(len(batch)))
				files := NewFileCache(capacity)
				ls := make([]*Log, logs)
				root := b.TempDir()
				for i := range ls {
					l, err := Open(filepath.Join(root, fmt.Sprint(i)), Config{Flush: p, Files: files})
					if err != nil {
						b.Fatal(err)
					}
					defer l.Close()
					ls[i] = l
				}
				i := 0
				b.ResetTimer()
				for b.Loop() {
					l := ls[i%logs]
					i++
					_, leo, err := l.Append(batch, 0)
					if err == nil {
						err = l.MakeDurable(context.Background(), leo)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
				b.ReportMetric(float64(files.OpenFiles()), "open-files")
			})
		}
	}
}

// BenchmarkLogAppendNewEpoch appends 1 KiB batches with FlushOS, each in a
// new leader epoch (the first append of each partition after a leader
// change, as a broker sees them at scale): the epoch cache is written to
// its checkpoint only at the next roll or Close, not by the append.
func BenchmarkLogAppendNewEpoch(b *testing.B) {
	batch := benchBatch(b, 1<<10)
	l, err := Open(b.TempDir(), Config{Flush: FlushOS})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.SetBytes(int64(len(batch)))
	epoch := int32(0)
	for b.Loop() {
		epoch++
		if _, _, err := l.Append(batch, epoch); err != nil {
			b.Fatal(err)
		}
	}
}
