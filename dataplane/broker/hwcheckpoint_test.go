package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/partition/hwcheckpoint"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

// hwBroker is a broker on dataDir that is never run, with its run context
// set so that assignments open replicas; stop closes its partitions as Run
// does at its end and frees the data dir.
type hwBroker struct {
	*Broker
	cancel  context.CancelFunc
	stopped sync.Once
}

func newHWBroker(t *testing.T, dataDir string) (*hwBroker, error) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.DataDir = dataDir
	cfg.BrokerToken = "broker-token-0123456789"
	b, err := New(cfg, Deps{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.mu.Lock()
	b.runCtx = ctx
	b.mu.Unlock()
	hb := &hwBroker{Broker: b, cancel: cancel}
	t.Cleanup(hb.stop)
	return hb, nil
}

func (b *hwBroker) stop() {
	b.stopped.Do(func() {
		b.cancel()
		b.replicas.Close()
		_ = b.dirLock.Release()
	})
}

func (b *hwBroker) checkpoint(t *testing.T) map[hwcheckpoint.Key]int64 {
	t.Helper()
	hws, err := hwcheckpoint.Read(filepath.Join(b.cfg.DataDir, hwcheckpoint.Name))
	require.NoError(t, err)
	return hws
}

// produce writes n records to partition i of growTopic, which this broker
// leads alone, and waits for them to be committed (acks=all).
func (b *hwBroker) produce(t *testing.T, i int32, n int) {
	t.Helper()
	p := b.partition(growTopic, i)
	require.NotNil(t, p)
	testenv.Wait(t, 10*time.Second, "the partition to lead", func() error {
		if role := p.Status().Role; role != partition.RoleLeader {
			return fmt.Errorf("role %v", role)
		}
		return nil
	})
	vb, err := log.ValidateLeaderBatch(plainBatch(t, n), 1<<20)
	require.NoError(t, err)
	_, err = p.Produce(context.Background(), []log.ValidBatch{vb}, sluicev1.Acks_ACKS_ALL, time.Minute, nil)
	require.NoError(t, err)
}

func all(n int32) []int32 {
	var ps []int32
	for i := range n {
		ps = append(ps, i)
	}
	return ps
}

// TestBrokerHWCheckpointOneFilePerInterval: one round of the checkpoint
// loop over many partitions whose HW moved writes the HWs of them all into
// the broker's one checkpoint file, and no file per partition (issue 15:
// at 6000 partitions, the per-partition files cost 12,000 fsyncs a
// second); a round in which nothing changed writes nothing.
func TestBrokerHWCheckpointOneFilePerInterval(t *testing.T) {
	t.Parallel()
	const n = 40
	b, err := newHWBroker(t, t.TempDir())
	require.NoError(t, err)
	b.applyMetadata(toClusterMeta(assignments(3, n, all(n)...)))
	want := map[hwcheckpoint.Key]int64{}
	for i := range int32(n) {
		b.produce(t, i, int(i%3)+1)
		want[hwcheckpoint.Key{TopicID: growTopic, Partition: i}] = int64(i%3) + 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.replicas.HWCheckpointLoop(ctx, 10*time.Millisecond) }()
	path := filepath.Join(b.cfg.DataDir, hwcheckpoint.Name)
	testenv.Wait(t, 10*time.Second, "the broker's checkpoint to hold every HW", func() error {
		hws, err := hwcheckpoint.Read(path)
		if err != nil {
			return err
		}
		if fmt.Sprint(hws) != fmt.Sprint(want) {
			return fmt.Errorf("checkpoint holds %v", hws)
		}
		return nil
	})
	cancel()
	<-done
	for i := range int32(n) {
		require.NoFileExists(t, filepath.Join(b.partition(growTopic, i).Dir(), "high-watermark"), "no file per partition")
	}

	before, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, b.replicas.CheckpointHWs())
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "nothing changed: nothing written")

	b.produce(t, 7, 2)
	require.NoError(t, b.replicas.CheckpointHWs())
	after, err = os.Stat(path)
	require.NoError(t, err)
	require.False(t, os.SameFile(before, after), "an HW moved: written again")
	want[hwcheckpoint.Key{TopicID: growTopic, Partition: 7}] = 4
	require.Equal(t, want, b.checkpoint(t))
}

// TestBrokerHWCheckpointRestart: a restarted broker's replicas start from
// the HWs its checkpoint holds, also those of replicas it had stopped
// hosting (their data stays: they start from it if they come back); a
// deleted topic's partitions leave the checkpoint with their data.
func TestBrokerHWCheckpointRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := newHWBroker(t, dir)
	require.NoError(t, err)
	b.applyMetadata(toClusterMeta(assignments(3, 4, all(4)...)))
	for i := range int32(4) {
		b.produce(t, i, int(i)+2)
	}
	// Partition 3 moves to broker 2: its replica here closes, its data
	// and HW stay.
	b.applyMetadata(toClusterMeta(assignments(4, 4, 0, 1, 2)))
	require.Nil(t, b.partition(growTopic, 3))
	b.stop()
	want := map[hwcheckpoint.Key]int64{}
	for i := range int32(4) {
		want[hwcheckpoint.Key{TopicID: growTopic, Partition: i}] = int64(i) + 2
	}
	require.Equal(t, want, b.checkpoint(t), "written at shutdown")

	b, err = newHWBroker(t, dir)
	require.NoError(t, err)
	require.NoError(t, b.replicas.CheckpointHWs())
	require.Equal(t, want, b.checkpoint(t), "before any replica opens, the file keeps every HW")
	m := toClusterMeta(assignments(5, 4, all(4)...))
	for _, pm := range m.ByID[growTopic].Partitions {
		p, err := b.replicas.Open(m.ByID[growTopic], pm) // no role yet: the HW is the one it opened with
		require.NoError(t, err)
		require.EqualValues(t, pm.Partition+2, p.HighWatermark(), "partition %d", pm.Partition)
	}

	// The topic is deleted: its partitions go from the file with their data.
	b.applyMetadata(toClusterMeta(&sluicev1.WatchAssignmentsResponse{MetadataVersion: 6}))
	require.NoError(t, b.replicas.CheckpointHWs())
	require.Empty(t, b.checkpoint(t))
	require.NoDirExists(t, filepath.Join(dir, growTenant, growTopic+"-0"))
}

// TestBrokerHWCheckpointUpgrade: a data dir of a broker that kept a
// high-watermark file per partition: each replica starts from its own
// file, and once the broker's checkpoint holding it is written, the
// per-partition file goes; the next start reads the broker's file.
func TestBrokerHWCheckpointUpgrade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := newHWBroker(t, dir)
	require.NoError(t, err)
	b.applyMetadata(toClusterMeta(assignments(3, 3, all(3)...)))
	var legacy []string
	for i := range int32(3) {
		b.produce(t, i, 5)
		legacy = append(legacy, filepath.Join(b.partition(growTopic, i).Dir(), "high-watermark"))
	}
	b.stop()
	// As the old broker left it: no broker file, one per partition.
	require.NoError(t, os.Remove(filepath.Join(dir, hwcheckpoint.Name)))
	for i, f := range legacy {
		require.NoError(t, os.WriteFile(f, fmt.Appendf(nil, "%d\n", i+1), 0o644))
	}

	b, err = newHWBroker(t, dir)
	require.NoError(t, err)
	m := toClusterMeta(assignments(4, 3, all(3)...))
	for _, pm := range m.ByID[growTopic].Partitions {
		p, err := b.replicas.Open(m.ByID[growTopic], pm)
		require.NoError(t, err)
		require.EqualValues(t, pm.Partition+1, p.HighWatermark(), "partition %d: its legacy file", pm.Partition)
	}
	require.NoError(t, b.replicas.CheckpointHWs())
	want := map[hwcheckpoint.Key]int64{}
	for i, f := range legacy {
		require.NoFileExists(t, f)
		want[hwcheckpoint.Key{TopicID: growTopic, Partition: int32(i)}] = int64(i) + 1
	}
	require.Equal(t, want, b.checkpoint(t))
	b.stop()

	b, err = newHWBroker(t, dir)
	require.NoError(t, err)
	for _, pm := range m.ByID[growTopic].Partitions {
		p, err := b.replicas.Open(m.ByID[growTopic], pm)
		require.NoError(t, err)
		require.EqualValues(t, pm.Partition+1, p.HighWatermark(), "partition %d: the broker's file", pm.Partition)
	}
}

// TestBrokerHWCheckpointCorrupt: a broker whose HW checkpoint fails its
// checks refuses to start, naming the file; removing the file lets it
// start, every HW at 0.
func TestBrokerHWCheckpointCorrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := newHWBroker(t, dir)
	require.NoError(t, err)
	b.applyMetadata(toClusterMeta(assignments(3, 1, 0)))
	b.produce(t, 0, 3)
	b.stop()
	path := filepath.Join(dir, hwcheckpoint.Name)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[len(data)-3] ^= 1 // the checksum
	require.NoError(t, os.WriteFile(path, data, 0o644))

	_, err = newHWBroker(t, dir)
	require.ErrorIs(t, err, hwcheckpoint.ErrCorrupt)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "remove the file to start with every high watermark at 0")

	require.NoError(t, os.Remove(path))
	b, err = newHWBroker(t, dir)
	require.NoError(t, err)
	m := toClusterMeta(assignments(4, 1, 0))
	p, err := b.replicas.Open(m.ByID[growTopic], m.ByID[growTopic].Partitions[0])
	require.NoError(t, err)
	require.EqualValues(t, 0, p.HighWatermark())
	require.EqualValues(t, 3, p.Log().LEO())
}
