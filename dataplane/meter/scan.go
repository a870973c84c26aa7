package meter

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
)

// maxReadsPerScan bounds the reads of one Scan: a run of transaction
// markers (dropped by the read path, so not counted against maxBytes)
// cannot keep it reading.
const maxReadsPerScan = 16

// Scanned is what Scan found.
type Scanned struct {
	// End is where the scanned range ends (exclusive): the offset after
	// the last batch read, or from when nothing was read.
	End int64
	// Bytes is the sum of the sizes of the data batches in the range,
	// transaction markers (control batches) excluded.
	Bytes int64
	// Skipped: from lay below the partition's first offset (retention
	// removed it, or it was never copied to the object store, before
	// metering reached it): [from, End) is no longer in the log, and
	// End is the first offset it holds. Bytes is 0.
	Skipped bool
}

// Scan meters the log of p, a partition this broker leads, from offset
// from: the whole batches from the one holding from on, below the high
// watermark, read through the partition's read path (FetchRecords, which
// also reads the object store below the local log start of a tiered
// partition and drops control batches), until the HW or about maxBytes
// of batches (at least one batch). from is the control plane's cursor, a
// batch boundary below the HW on every in-sync replica; only a leader
// elected uncleanly, whose log was shorter than the cursor, holds a batch
// across it, which then counts in full.
//
// Nothing to meter (from at or above the HW, as on a new leader whose HW
// is still catching up) is End == from and no error; a read error is
// returned with what was scanned before it.
func Scan(ctx context.Context, p *partition.Replica, from int64, maxBytes int) (Scanned, error) {
	s := Scanned{End: from}
	hw := p.HighWatermark()
	if from >= hw {
		return s, nil
	}
	read := 0
	for i := 0; i < maxReadsPerScan && read < maxBytes; i++ {
		f, err := p.FetchRecords(ctx, s.End, partition.FetchOptions{MaxBytes: maxBytes - read})
		if err != nil {
			var oor *log.OffsetOutOfRangeError
			if s.End == from && errors.As(err, &oor) && oor.LogStart > from && oor.LogStart <= hw {
				return Scanned{End: oor.LogStart, Skipped: true}, nil
			}
			if s.End > from {
				return s, nil // the next scan starts there and meets the error again
			}
			return s, err
		}
		if f.Next <= s.End {
			break
		}
		s.Bytes += int64(len(f.Data))
		read += len(f.Data)
		s.End = f.Next
		if s.End >= f.HW {
			break
		}
	}
	return s, nil
}
