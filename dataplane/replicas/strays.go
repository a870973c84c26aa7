package replicas

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/tenants/system"
)

// deleteStrays deletes the data of partitions whose topic was deleted
// while the broker was down (or before it first heard its assignments):
// a running broker deletes a deleted topic's data when the topic leaves
// its assignments (drop), but one that was not running never sees that
// happen. v is the first full view this process applied; a partition
// directory whose topic id it does not name belongs to a deleted topic
// (topic ids are never reused). The directories are listed now, before
// any later view can open a partition, and removed in the background.
func (m *Manager) deleteStrays(ctx context.Context, v *cluster.View) {
	type stray struct {
		dir, tenantID, topicID string
		partition              int32
	}
	var strays []stray
	tenants, err := os.ReadDir(m.cfg.DataDir)
	if err != nil {
		m.logger.Warn("list the data dir for partitions of deleted topics", "dir", m.cfg.DataDir, "err", err)
		return
	}
	for _, td := range tenants {
		if !td.IsDir() || !isUUID(td.Name()) {
			continue // .lock, .tier-cache, checkpoints
		}
		parts, err := os.ReadDir(filepath.Join(m.cfg.DataDir, td.Name()))
		if err != nil {
			m.logger.Warn("list the data dir for partitions of deleted topics", "dir", td.Name(), "err", err)
			continue
		}
		for _, pd := range parts {
			topicID, partition, ok := parsePartitionDir(pd.Name())
			if !pd.IsDir() || !ok {
				continue
			}
			if _, exists := v.ByID[topicID]; exists {
				continue
			}
			strays = append(strays, stray{filepath.Join(m.cfg.DataDir, td.Name(), pd.Name()), td.Name(), topicID, partition})
		}
	}
	if len(strays) == 0 {
		return
	}
	go func() {
		for _, s := range strays {
			if err := os.RemoveAll(s.dir); err != nil {
				m.logger.Warn("delete partition data of a deleted topic", "topic", s.topicID, "partition", s.partition, "err", err)
				continue
			}
			m.logger.Info("deleted partition data of a topic deleted while the broker was down", "topic", s.topicID, "partition", s.partition)
			if m.cfg.Host.Tier != nil && s.tenantID != system.TenantID {
				m.deleteRemotePartition(ctx, s.tenantID, s.topicID, s.partition)
			}
		}
	}()
}

// parsePartitionDir splits a partition directory name, "<topic id>-<n>".
func parsePartitionDir(name string) (topicID string, partition int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || !isUUID(name[:i]) {
		return "", 0, false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return name[:i], int32(n), true
}

// isUUID reports whether s is a UUID in its canonical text form.
func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return len(s) == 36 && err == nil
}

// deleteRemotePartition deletes a deleted topic's partition from the
// object store (every replica does it; deleting is idempotent), retrying
// while ctx lasts.
func (m *Manager) deleteRemotePartition(ctx context.Context, tenantID, topicID string, partition int32) {
	for attempt := 1; ; attempt++ {
		n, err := m.cfg.Host.Tier.DeletePartition(ctx, tenantID, topicID, partition)
		if err == nil {
			if n > 0 {
				m.logger.Info("deleted remote data of a deleted topic", "topic", topicID, "partition", partition, "objects", n)
			}
			return
		}
		m.logger.Warn("delete remote data of a deleted topic", "topic", topicID, "partition", partition, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt)*10*time.Second, 5*time.Minute)):
		}
	}
}
