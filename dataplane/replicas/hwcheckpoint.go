package replicas

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/partition/hwcheckpoint"
)

// ReadHWCheckpoint reads the HW checkpoint of the broker whose data dir
// is dataDir (hwcheckpoint.Read), for Config.HWs. The file is
// written atomically, so damage means a disk not to trust (Kafka takes
// such a log dir offline): the error says so; hwcheckpoint's doc says what
// removing the file costs.
func ReadHWCheckpoint(dataDir string) (map[cluster.PartKey]int64, error) {
	hws, err := hwcheckpoint.Read(filepath.Join(dataDir, hwcheckpoint.Name))
	if err != nil {
		return nil, fmt.Errorf("%w; the data dir's disk may be damaged: check it, and remove the file to start with every high watermark at 0", err)
	}
	out := make(map[cluster.PartKey]int64, len(hws))
	for k, hw := range hws {
		out[cluster.PartKey{TopicID: k.TopicID, Partition: k.Partition}] = hw
	}
	return out, nil
}

// HWCheckpointLoop writes the HW checkpoint (CheckpointHWs), and
// snapshots the producer state of every replica whose log rolled since
// its last snapshot (SnapshotProducers), every interval until ctx ends;
// Close writes a last checkpoint and snapshot.
func (m *Manager) HWCheckpointLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		if err := m.CheckpointHWs(); err != nil && ctx.Err() == nil {
			m.logger.Warn("checkpoint high watermarks", "err", err)
		}
		for _, p := range m.All() {
			if err := p.SnapshotProducers(time.Now(), false); err != nil && ctx.Err() == nil {
				m.logger.Warn("snapshot producer state", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
			}
		}
	})
}

// CheckpointHWs writes the broker's HW checkpoint
// (hwcheckpoint.Write: one file in the data dir) with the HW of
// every open replica and the kept ones (hwKept), when it differs from
// what the file holds. Then the replicas the durable file holds drop
// their legacy per-partition file.
func (m *Manager) CheckpointHWs() error {
	m.hwMu.Lock()
	defer m.hwMu.Unlock()
	m.mu.Lock()
	parts := slices.Collect(maps.Values(m.parts))
	hws := maps.Clone(m.hwKept)
	m.mu.Unlock()
	for _, p := range parts {
		// Outside m.mu: a replica's lock may be held for a while (a
		// truncation). A replica closed meanwhile is in hwKept too, with
		// the same or a lower HW: either is one it reached.
		hws[cluster.PartKey{TopicID: p.TopicID(), Partition: p.Partition()}] = p.HighWatermark()
	}
	if !maps.Equal(hws, m.hwWritten) {
		file := make(map[hwcheckpoint.Key]int64, len(hws))
		for k, hw := range hws {
			file[hwcheckpoint.Key{TopicID: k.TopicID, Partition: k.Partition}] = hw
		}
		if err := hwcheckpoint.Write(filepath.Join(m.cfg.DataDir, hwcheckpoint.Name), file); err != nil {
			return err
		}
		m.hwWritten = hws
	}
	var errs []error
	for _, p := range parts {
		if _, ok := m.hwWritten[cluster.PartKey{TopicID: p.TopicID(), Partition: p.Partition()}]; ok {
			if err := p.HWCheckpointed(); err != nil {
				errs = append(errs, fmt.Errorf("partition %s/%d: %w", p.TopicID(), p.Partition(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// RetentionLoop applies retention to every replica every interval until
// ctx ends; a replica whose log failed stops the broker (Host.FailStop).
func (m *Manager) RetentionLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		for _, p := range m.All() {
			n, err := p.ApplyRetention()
			switch {
			case err != nil && ctx.Err() == nil:
				m.logger.Warn("apply retention", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
				if ferr := p.Log().Failed(); ferr != nil {
					m.cfg.Host.FailStop(p.TopicID(), p.Partition(), ferr)
					return
				}
			case n > 0:
				m.logger.Info("retention deleted segments", "topic", p.TopicID(), "partition", p.Partition(), "segments", n, "log_start_offset", p.Log().LogStartOffset())
			}
		}
	})
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
