package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// testMetadataChanges: every kind of metadata write shows up in
// MetadataChangesSince the version before it, as the row is now, and
// nothing else does; the version returned is the store's.
func testMetadataChanges(t *testing.T, s store.Store) {
	ctx := t.Context()
	type key struct {
		topic     string
		partition int32
	}
	last, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	// changed checks the changes since the last step: exactly the
	// partitions want (as ListAllPartitions returns them now) and the
	// deleted topic ids deleted.
	changed := func(what string, want []key, deleted ...string) {
		t.Helper()
		ch, err := s.MetadataChangesSince(ctx, last)
		require.NoError(t, err, what)
		v, err := s.MetadataVersion(ctx)
		require.NoError(t, err)
		require.Equal(t, v, ch.Version, "%s: the version read with the changes", what)
		if len(want) > 0 || len(deleted) > 0 {
			require.Greater(t, ch.Version, last, "%s bumps the version", what)
		}
		all, err := s.ListAllPartitions(ctx)
		require.NoError(t, err)
		var wantParts []store.PartitionWithTopic
		for _, p := range all { // in ListAllPartitions order
			for _, k := range want {
				if k == (key{p.TopicID, p.Partition.Partition}) {
					wantParts = append(wantParts, p)
				}
			}
		}
		require.Equal(t, wantParts, ch.Partitions, "%s: changed partitions", what)
		if len(deleted) == 0 {
			deleted = nil
		}
		require.Equal(t, deleted, ch.DeletedTopics, "%s: deleted topics", what)
		last = ch.Version
	}

	ten, _ := createTenant(t, s)
	other, _ := createTopic(t, s, ten.ID, "other", 2)
	changed("CreateTopic (first)", []key{{other.ID, 0}, {other.ID, 1}})
	changed("nothing", nil)

	tp, parts := createTopic(t, s, ten.ID, "c", 3)
	changed("CreateTopic", []key{{tp.ID, 0}, {tp.ID, 1}, {tp.ID, 2}})

	_, err = s.UpdateTopicConfig(ctx, ten.ID, "c", at(time.Hour), func(cur store.Topic) (store.TopicConfig, error) {
		c := cur.Config
		c.RetentionMs = 1234
		return c, nil
	})
	require.NoError(t, err)
	changed("UpdateTopicConfig", []key{{tp.ID, 0}, {tp.ID, 1}, {tp.ID, 2}})

	_, err = s.AddPartitions(ctx, ten.ID, tp.ID, 3, newPartitionValues(tp.ID, 3, 2, tp.ReplicationFactor), store.CountLimits{}, at(time.Hour))
	require.NoError(t, err)
	// The topic row changed too (its partition count), so all of it is listed.
	changed("AddPartitions", []key{{tp.ID, 0}, {tp.ID, 1}, {tp.ID, 2}, {tp.ID, 3}, {tp.ID, 4}})
	_, err = s.AddPartitions(ctx, ten.ID, tp.ID, 3, newPartitionValues(tp.ID, 3, 1, tp.ReplicationFactor), store.CountLimits{}, at(time.Hour))
	require.ErrorIs(t, err, store.ErrConflict)
	changed("a refused AddPartitions", nil)

	p := parts[1]
	p.ISR, p.PartitionEpoch = p.Replicas[:1], 1
	require.NoError(t, s.UpdatePartition(ctx, p, 0))
	changed("UpdatePartition", []key{{tp.ID, 1}})
	require.ErrorIs(t, s.UpdatePartition(ctx, p, 0), store.ErrConflict)
	changed("a lost UpdatePartition", nil)

	l, ok, err := s.AcquireControllerLease(ctx, "ctl", at(0), time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	changed("AcquireControllerLease", nil)
	q := parts[2]
	q.Leader, q.LeaderEpoch, q.PartitionEpoch = q.Replicas[1], 1, 1
	require.NoError(t, s.UpdatePartitionFenced(ctx, q, 0, l.Epoch))
	changed("UpdatePartitionFenced", []key{{tp.ID, 2}})
	// Two changes in one step: listed once each, as they are now.
	p.ISR, p.PartitionEpoch = p.Replicas, 2
	require.NoError(t, s.UpdatePartition(ctx, p, 1))
	p.ISR, p.PartitionEpoch = p.Replicas[:2], 3
	require.NoError(t, s.UpdatePartition(ctx, p, 2))
	q.ISR, q.PartitionEpoch = q.Replicas[1:], 2
	require.NoError(t, s.UpdatePartition(ctx, q, 1))
	changed("UpdatePartition twice and another", []key{{tp.ID, 1}, {tp.ID, 2}})

	// Batched writes: the partitions written, not those whose
	// compare-and-set lost.
	r := parts[0]
	r.ISR, r.PartitionEpoch = r.Replicas[:1], 1
	p.ISR, p.PartitionEpoch = p.Replicas, 4
	outcomes, err := s.UpdatePartitions(ctx, []store.PartitionUpdate{{Partition: r, ExpectedEpoch: 0}, {Partition: p, ExpectedEpoch: 0}})
	require.NoError(t, err)
	require.NoError(t, outcomes[0])
	require.ErrorIs(t, outcomes[1], store.ErrConflict)
	changed("UpdatePartitions", []key{{tp.ID, 0}})
	q.Leader, q.LeaderEpoch, q.PartitionEpoch = q.Replicas[2], 2, 3
	outcomes, err = s.UpdatePartitionsFenced(ctx, []store.PartitionUpdate{{Partition: q, ExpectedEpoch: 2}}, l.Epoch)
	require.NoError(t, err)
	require.NoError(t, outcomes[0])
	changed("UpdatePartitionsFenced", []key{{tp.ID, 2}})

	b, err := s.RegisterBroker(ctx, store.Broker{ID: 1, Address: "127.0.0.1:9001", LeaseExpiresAt: at(time.Second)})
	require.NoError(t, err)
	changed("RegisterBroker (bumps the version; brokers are read whole)", nil)
	_, err = s.HeartbeatBroker(ctx, 1, b.Epoch, at(time.Minute))
	require.NoError(t, err)
	changed("HeartbeatBroker", nil)

	_, err = s.DeleteTopic(ctx, ten.ID, tp.Name)
	require.NoError(t, err)
	changed("DeleteTopic", nil, tp.ID)

	// A reader further behind sees the union, the deleted topic's
	// partitions not among them.
	ch, err := s.MetadataChangesSince(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{tp.ID}, ch.DeletedTopics)
	require.Len(t, ch.Partitions, 2)
	for _, p := range ch.Partitions {
		require.Equal(t, other.ID, p.TopicID)
	}
}

// MetadataChangesPruned: tombstones of deleted topics are kept about an
// hour; writing one prunes the older ones, and a reader from before a
// pruned one is refused (ErrChangesPruned) rather than told less. age makes
// every tombstone s holds more than an hour old (SQL of the driver's own).
func MetadataChangesPruned(t *testing.T, s store.Store, age func(t *testing.T)) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	a, _ := createTopic(t, s, ten.ID, "a", 1)
	b, _ := createTopic(t, s, ten.ID, "b", 1)
	before, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	_, err = s.DeleteTopic(ctx, ten.ID, a.Name)
	require.NoError(t, err)
	afterA, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	ch, err := s.MetadataChangesSince(ctx, before)
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, ch.DeletedTopics)

	age(t)
	ch, err = s.MetadataChangesSince(ctx, before)
	require.NoError(t, err, "an old tombstone stays until the next deletion prunes it")
	require.Equal(t, []string{a.ID}, ch.DeletedTopics)

	_, err = s.DeleteTopic(ctx, ten.ID, b.Name)
	require.NoError(t, err)
	_, err = s.MetadataChangesSince(ctx, before)
	require.ErrorIs(t, err, store.ErrChangesPruned, "a's tombstone is gone")
	ch, err = s.MetadataChangesSince(ctx, afterA)
	require.NoError(t, err, "a reader past the pruned deletion still reads changes")
	require.Equal(t, []string{b.ID}, ch.DeletedTopics)
}
