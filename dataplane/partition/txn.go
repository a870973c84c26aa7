package partition

import (
	"context"
	"errors"
	"time"
)

// Marker is a transaction marker a transaction coordinator writes to this
// partition: a control batch ending ProducerID's transaction here,
// committing or aborting its batches (record.ControlRecord).
type Marker struct {
	ProducerID    int64
	ProducerEpoch int16
	// CoordinatorEpoch is the writing coordinator's leader epoch.
	CoordinatorEpoch int32
	Commit           bool
}

// WriteMarker appends m as the leader with acks=all and returns its offset
// once the ISR has it. Being wired (issue 16): it refuses every marker.
func (p *Replica) WriteMarker(ctx context.Context, m Marker, timeout time.Duration) (int64, error) {
	return -1, errors.New("transaction markers are not supported by this partition yet")
}
