package broker

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/dataplane/partition"
)

// isrLoop asks the controller to shrink or expand the ISR of partitions this
// broker leads, every half second: one AlterPartitions call carrying every
// leader's proposal (partition.AlterISRs).
func (b *Broker) isrLoop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		partition.AlterISRs(ctx, b.host, b.partitions())
	}
}
