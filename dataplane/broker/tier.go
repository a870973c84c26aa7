package broker

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/sluicemq/sluice/tiered"
	"github.com/sluicemq/sluice/tiered/objstore"
)

// Tiered storage on a broker: leaders copy closed segments below the HW to
// the object store every --tier-copy-interval (tierLoop, which runs each
// replica's CopyToTier), every replica's local retention deletes only what
// is copied (followers learn how far from the leader's fetch responses),
// and fetches below the local log start read the object store (the replica
// does both; see dataplane/partition). The internal offsets topic stays
// local.

// newTier starts tiered storage when the broker has an object store.
func (b *Broker) newTier() error {
	if b.tierStore == nil {
		return nil
	}
	dir := b.cfg.TierCacheDir
	if dir == "" {
		dir = filepath.Join(b.cfg.DataDir, ".tier-cache")
	}
	t, err := tiered.New(tiered.Config{
		Store: objstore.Instrument(b.tierStore, b.registry, "tier"), Meta: b.cp, BrokerID: b.cfg.ID, BrokerEpoch: b.brokerEpoch.Load,
		CacheDir: dir, CacheBytes: b.cfg.TierCacheBytes,
		MaxConcurrentReads: b.cfg.TierMaxConcurrentReads, ReadBytesPerSecond: b.cfg.TierReadBytesPerSecond,
		Metrics: tiered.NewMetrics(b.registry), Logger: b.logger,
	})
	if err != nil {
		return err
	}
	b.tier = t
	return nil
}

// tierLoop copies and applies total retention to the led partitions, a few
// at a time.
func (b *Broker) tierLoop(ctx context.Context) {
	every(ctx, b.cfg.TierCopyInterval, func() {
		sem := make(chan struct{}, 4)
		var wg sync.WaitGroup
		for _, p := range b.partitions() {
			if !p.Tiered() {
				continue
			}
			lead, ok := p.TierLeader()
			if !ok {
				b.tier.Forget(p.TopicID(), p.Partition()) // reloaded (and cleaned up) when it leads again
				continue
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				p.CopyToTier(ctx, lead)
			})
		}
		wg.Wait()
	})
}
