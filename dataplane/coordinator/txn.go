package coordinator

import (
	"context"
	"errors"
)

// WriteTxnMarker ends producerID's transaction in the group's offsets
// (KIP-447): a commit makes its pending offsets the group's committed
// offsets, an abort drops them. Being wired (issue 16): it refuses every
// marker.
func (c *Coordinator) WriteTxnMarker(ctx context.Context, tenantID, group string, producerID int64, epoch int16, coordinatorEpoch int32, commit bool) error {
	return errors.New("transactional offsets are not supported by this coordinator yet")
}
