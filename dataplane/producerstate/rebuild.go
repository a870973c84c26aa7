package producerstate

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/record"
)

// LogReader is what Rebuild reads of a partition's log; *log.Log has it.
type LogReader interface {
	// Read returns whole batches starting with the one that holds offset,
	// at least one, or nothing at the LEO; outside [LogStartOffset, LEO]
	// an error matching log.ErrOffsetOutOfRange.
	Read(offset int64, maxBytes int) ([]byte, error)
	LogStartOffset() int64
	LEO() int64
}

var _ LogReader = (*log.Log)(nil)

// rebuildReadBytes is the size of one log read during a rebuild.
const rebuildReadBytes = 1 << 20

// Rebuild returns the producer state of the log r reads, with snapshots in
// dir, and the offset of the snapshot it started from (0 without one): it
// removes the snapshots above the LEO (they describe batches the log no
// longer has), loads the newest remaining one (see LoadLatest), and
// applies every batch (FromBatch: markers included, so ongoing and aborted
// transactions come back) from max(snapshot offset, log start offset) to
// the LEO as read when it starts; a marker whose control record does not
// decode fails it. The result's Offset is that LEO.
// Producers whose batches all lie in segments deleted before the snapshot
// was taken are unknown, as in Kafka. Rebuild does not expire producers; the
// caller calls Expire with its clock. The log must not be truncated while
// Rebuild runs; appends past the LEO and retention are harmless.
func Rebuild(dir string, r LogReader) (_ *State, snapshot int64, _ error) {
	leo := r.LEO()
	if err := DeleteAbove(dir, leo); err != nil {
		return nil, 0, fmt.Errorf("rebuild producer state: %w", err)
	}
	s, snapshot, err := LoadLatest(dir, leo)
	if err != nil {
		return nil, 0, fmt.Errorf("rebuild producer state: %w", err)
	}
	off := max(snapshot, r.LogStartOffset())
	for off < leo {
		data, err := r.Read(off, rebuildReadBytes)
		if errors.Is(err, log.ErrOffsetOutOfRange) {
			// Retention removed the segment in the meantime; the batches
			// there are gone as if they predated the snapshot.
			if start := r.LogStartOffset(); start > off {
				off = start
				continue
			}
		}
		if err != nil {
			return nil, 0, fmt.Errorf("rebuild producer state: read log at %d: %w", off, err)
		}
		if len(data) == 0 {
			return nil, 0, fmt.Errorf("rebuild producer state: log ends at %d, before its LEO %d", off, leo)
		}
		from := off
		for rest := data; len(rest) > 0 && off < leo; {
			b, next, err := record.ReadBatch(rest)
			if err != nil {
				return nil, 0, fmt.Errorf("rebuild producer state: batch at offset %d: %w", off, err)
			}
			rest = next
			if b.LastOffset() < off {
				continue // before the offset, in the first batch read
			}
			pb, _, err := FromBatch(b)
			if err != nil {
				return nil, 0, fmt.Errorf("rebuild producer state: batch at offset %d: %w", b.BaseOffset(), err)
			}
			s.Apply(pb)
			off = b.LastOffset() + 1
		}
		if off == from {
			return nil, 0, fmt.Errorf("rebuild producer state: log read at %d returned no batch holding it", from)
		}
	}
	s.offset = max(s.offset, leo)
	return s, snapshot, nil
}
