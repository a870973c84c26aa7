package replicas

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/internal/testenv"
)

const (
	tenant  = "01a2316c-bf12-71c1-aeed-6a97ad3d38fa"
	orders  = "01a2316c-c0ab-7a02-b332-4a56b485e5ac"
	deleted = "01a2316c-bf77-7355-9a8f-a7deac7ee6b4"
)

// manager is a Manager of broker 1 on dir, with no peers: the replicas
// it leads alone need none.
func manager(t *testing.T, dir string, hws map[cluster.PartKey]int64) *Manager {
	t.Helper()
	return New(Config{DataDir: dir, HWs: hws, Host: &partition.Host{
		ID:                1,
		BrokerEpoch:       func() int64 { return 1 },
		Logger:            slog.New(slog.DiscardHandler),
		SegmentBytes:      1 << 20,
		SegmentAge:        time.Hour,
		Flush:             log.FlushOS,
		ReplicaLagTimeMax: 30 * time.Second,
		LeaderAddress:     func(int32) string { return "" },
		FailStop:          func(topicID string, id int32, err error) { t.Errorf("fail-stop %s/%d: %v", topicID, id, err) },
	}})
}

// view has topic orders with a partition per element of replicas, each
// led by its first replica, at version.
func view(version int64, replicas ...[]int32) *cluster.View {
	v := cluster.EmptyView()
	v.Version, v.Loaded = version, true
	t := &cluster.Topic{TenantID: tenant, ID: orders, Name: "orders", Config: cluster.TopicConfig{MinISR: 1, MaxMessageBytes: 1 << 20}}
	for i, rs := range replicas {
		t.Partitions = append(t.Partitions, cluster.Partition{TopicID: orders, Partition: int32(i), Replicas: rs, Leader: rs[0], LeaderEpoch: 1, ISR: rs})
	}
	v.AddTopic(t)
	return v
}

// TestManagerAppliesViews: a snapshot opens the replicas placed on this
// broker, and its first one deletes the directories of topics the view
// does not name (deleted while the broker was down); a delta closes the
// replica that moved away and keeps its data and HW; a view without the
// topic deletes its open replicas' data and forgets its HWs; Close
// checkpoints what is open; a Manager on the same dir starts from it.
func TestManagerAppliesViews(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stray := filepath.Join(dir, tenant, deleted+"-0")
	require.NoError(t, os.MkdirAll(stray, 0o755))
	other := filepath.Join(dir, tenant, "not-a-partition")
	require.NoError(t, os.MkdirAll(other, 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := manager(t, dir, map[cluster.PartKey]int64{{TopicID: deleted, Partition: 0}: 7})

	m.Apply(ctx, view(1, []int32{1}, []int32{1}, []int32{2}))
	require.Len(t, m.All(), 2)
	p0, p1 := m.Get(orders, 0), m.Get(orders, 1)
	require.NotNil(t, p0)
	require.NotNil(t, p1)
	require.Nil(t, m.Get(orders, 2), "placed on broker 2 only")
	require.Equal(t, filepath.Join(dir, tenant, orders+"-1"), p1.Dir())
	testenv.Wait(t, 10*time.Second, "the deleted topic's directory to go", func() error {
		if _, err := os.Stat(stray); !os.IsNotExist(err) {
			return fmt.Errorf("%s is still there (%v)", stray, err)
		}
		return nil
	})
	require.DirExists(t, other, "not a partition directory")
	require.NoError(t, m.CheckpointHWs())
	hws, err := ReadHWCheckpoint(dir)
	require.NoError(t, err)
	require.Equal(t, map[cluster.PartKey]int64{{TopicID: orders, Partition: 0}: 0, {TopicID: orders, Partition: 1}: 0}, hws, "a deleted topic's kept HW goes")

	// Partition 1 moves to broker 2.
	m.ApplyDelta(ctx, view(2, []int32{1}, []int32{2}, []int32{2}), []cluster.PartKey{{TopicID: orders, Partition: 1}})
	require.Same(t, p0, m.Get(orders, 0), "an unchanged replica is kept")
	require.Nil(t, m.Get(orders, 1))
	require.DirExists(t, p1.Dir(), "a moved replica's data stays")
	require.NoError(t, m.CheckpointHWs())
	hws, err = ReadHWCheckpoint(dir)
	require.NoError(t, err)
	require.Contains(t, hws, cluster.PartKey{TopicID: orders, Partition: 1}, "and its HW")
	m.Close()

	m = manager(t, dir, hws)
	m.Apply(ctx, view(3, []int32{1}, []int32{2}, []int32{2}))
	require.NotNil(t, m.Get(orders, 0))
	empty := cluster.EmptyView()
	empty.Version, empty.Loaded = 4, true
	m.Apply(ctx, empty)
	require.Empty(t, m.All())
	require.NoDirExists(t, p0.Dir(), "the deleted topic's open replica's data goes")
	require.NoError(t, m.CheckpointHWs())
	hws, err = ReadHWCheckpoint(dir)
	require.NoError(t, err)
	require.Empty(t, hws)
	m.Close()
}

func TestParsePartitionDir(t *testing.T) {
	t.Parallel()
	topic, n, ok := parsePartitionDir(orders + "-12")
	require.True(t, ok)
	require.Equal(t, orders, topic)
	require.EqualValues(t, 12, n)
	for _, name := range []string{"orders-1", orders, orders + "-x", orders + "--1", "-1"} {
		_, _, ok := parsePartitionDir(name)
		require.False(t, ok, name)
	}
}
