package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// countLoad is the oracle of PartitionLoad: the broker load counted from
// scratch over every stored partition (ListAllPartitions), each replica
// once and each leader (>= 0) once; brokers holding nothing are absent.
func countLoad(t testing.TB, s store.Store) map[int32]store.BrokerLoad {
	t.Helper()
	all, err := s.ListAllPartitions(t.Context())
	require.NoError(t, err)
	load := make(map[int32]store.BrokerLoad)
	for _, pt := range all {
		for _, r := range pt.Partition.Replicas {
			l := load[r]
			l.Replicas++
			load[r] = l
		}
		if pt.Partition.Leader >= 0 {
			l := load[pt.Partition.Leader]
			l.Leaders++
			load[pt.Partition.Leader] = l
		}
	}
	return load
}

// requireLoad checks PartitionLoad against the from-scratch count, and
// against want when want is not nil.
func requireLoad(t testing.TB, s store.Store, want map[int32]store.BrokerLoad, step string) {
	t.Helper()
	got, err := s.PartitionLoad(t.Context())
	require.NoError(t, err, step)
	require.Equal(t, countLoad(t, s), got, "%s: load against a count of every partition", step)
	if want != nil {
		require.Equal(t, want, got, step)
	}
}

// spreadPartitions returns n partitions of topicID numbered from `from`
// with rf replicas each over brokers 1..brokers, starting at broker
// first+i: a layout other than the fixtures' 1..3 rotation.
func spreadPartitions(topicID string, from, n, rf, brokers, first int32) []store.Partition {
	parts := make([]store.Partition, n)
	for i := range n {
		replicas := make([]int32, rf)
		for r := range rf {
			replicas[r] = (first+i+r)%brokers + 1
		}
		parts[i] = store.Partition{
			TopicID:   topicID,
			Partition: from + i,
			Replicas:  replicas,
			Leader:    replicas[0],
			ISR:       append([]int32(nil), replicas...),
		}
	}
	return parts
}

// testPartitionLoad: the load follows every write that changes replicas
// or leaders (creation, growth, elections, an offline partition, a
// reassignment, the controller's fenced writes, deletion), equals a count
// of every partition after each, and ignores what does not change it (ISR
// changes, lost compare-and-sets, refused creations).
func testPartitionLoad(t *testing.T, s store.Store) {
	ctx := t.Context()
	requireLoad(t, s, map[int32]store.BrokerLoad{}, "empty")

	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	// t1: 3 partitions over brokers 1..3 (rf 3): leaders 1, 2, 3.
	createTopic(t, s, ten.ID, "t1", 3)
	// t2: 2 partitions rf 2: replicas (1,2), (2,3); partition 1 offline.
	_, parts := createTopic(t, s, other.ID, "t2", 2)
	off := parts[1]
	off.Leader, off.ISR, off.PartitionEpoch = -1, nil, 1
	require.NoError(t, s.UpdatePartition(ctx, off, 0))
	// t3 is deleted and counts no more.
	createTopic(t, s, ten.ID, "t3", 3)
	requireLoad(t, s, nil, "t3 created")
	_, err := s.DeleteTopic(ctx, ten.ID, "t3")
	require.NoError(t, err)
	requireLoad(t, s, map[int32]store.BrokerLoad{
		1: {Replicas: 3 + 1, Leaders: 1 + 1},
		2: {Replicas: 3 + 2, Leaders: 1},
		3: {Replicas: 3 + 1, Leaders: 1},
	}, "t3 deleted")

	// A topic over brokers 1..6, rf 3, then grown.
	wide, _ := newTopicValue(ten.ID, "wide", 4)
	wideParts := spreadPartitions(wide.ID, 0, 4, 3, 6, 3)
	require.NoError(t, s.CreateTopic(ctx, wide, wideParts, store.CountLimits{}))
	requireLoad(t, s, nil, "wide created")
	grown := spreadPartitions("ignored", 4, 5, 3, 6, 0)
	_, err = s.AddPartitions(ctx, ten.ID, wide.ID, 4, grown, store.CountLimits{}, at(time.Hour))
	require.NoError(t, err)
	requireLoad(t, s, nil, "wide grown")

	// Refused writes change nothing.
	before, err := s.PartitionLoad(ctx)
	require.NoError(t, err)
	dup, dupParts := newTopicValue(ten.ID, "wide", 2)
	require.ErrorIs(t, s.CreateTopic(ctx, dup, dupParts, store.CountLimits{}), store.ErrAlreadyExists)
	_, err = s.AddPartitions(ctx, ten.ID, wide.ID, 4, spreadPartitions("x", 4, 1, 3, 6, 0), store.CountLimits{}, at(time.Hour))
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.AddPartitions(ctx, ten.ID, wide.ID, 9, spreadPartitions("x", 9, 1, 3, 6, 0), store.CountLimits{MaxPartitions: 1}, at(time.Hour))
	require.ErrorIs(t, err, store.ErrLimitExceeded)
	stale := wideParts[0]
	stale.Leader, stale.PartitionEpoch = stale.Replicas[1], 8
	require.ErrorIs(t, s.UpdatePartition(ctx, stale, 7), store.ErrConflict)
	requireLoad(t, s, before, "refused writes")

	// An ISR change moves no count.
	p := wideParts[0]
	p.TopicID = wide.ID
	p.ISR, p.PartitionEpoch = p.Replicas[:2], 1
	require.NoError(t, s.UpdatePartition(ctx, p, 0))
	requireLoad(t, s, before, "ISR shrink")

	// An election: the leader moves to the second replica.
	p.Leader, p.LeaderEpoch, p.PartitionEpoch = p.Replicas[1], 1, 2
	require.NoError(t, s.UpdatePartition(ctx, p, 1))
	requireLoad(t, s, nil, "election")
	// Offline, then a reassignment onto other brokers, then led again.
	p.Leader, p.ISR, p.PartitionEpoch = -1, nil, 3
	require.NoError(t, s.UpdatePartition(ctx, p, 2))
	requireLoad(t, s, nil, "offline")
	p.Replicas, p.PartitionEpoch = []int32{5, 6, 7}, 4
	require.NoError(t, s.UpdatePartition(ctx, p, 3))
	requireLoad(t, s, nil, "reassigned")
	p.Leader, p.LeaderEpoch, p.ISR, p.PartitionEpoch = 7, 2, []int32{7}, 5
	require.NoError(t, s.UpdatePartition(ctx, p, 4))
	requireLoad(t, s, nil, "led again")

	// The controller's fenced write: an election of t1's partition 0.
	lease, ok, err := s.AcquireControllerLease(ctx, "ctl", at(0), time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	t1, err := s.GetTopic(ctx, ten.ID, "t1")
	require.NoError(t, err)
	t1Parts, err := s.ListPartitions(ctx, t1.ID)
	require.NoError(t, err)
	e := t1Parts[0]
	e.Leader, e.LeaderEpoch, e.ISR, e.PartitionEpoch = e.Replicas[2], e.LeaderEpoch+1, e.Replicas[1:], e.PartitionEpoch+1
	require.NoError(t, s.UpdatePartitionFenced(ctx, e, e.PartitionEpoch-1, lease.Epoch))
	requireLoad(t, s, nil, "fenced election")

	// Deleting every topic leaves no broker with a load.
	for _, d := range []struct{ tenant, name string }{{ten.ID, "t1"}, {other.ID, "t2"}, {ten.ID, "wide"}} {
		_, err := s.DeleteTopic(ctx, d.tenant, d.name)
		require.NoError(t, err)
		requireLoad(t, s, nil, "deleted "+d.name)
	}
	requireLoad(t, s, map[int32]store.BrokerLoad{}, "all deleted")
}

// testConcurrentPartitionLoad: topic creations of many tenants at once
// (not serialised by any tenant's lock), growths, elections and deletions,
// all over the same brokers, lose no count: afterwards the load equals a
// count of every partition.
func testConcurrentPartitionLoad(t *testing.T, s store.Store) {
	ctx := t.Context()
	const tenants = 10
	tens := make([]store.Tenant, tenants)
	for i := range tens {
		tens[i], _ = createTenant(t, s)
	}
	// Topics to grow, elect in and delete while the others are created.
	type victim struct {
		tenantID string
		topic    store.Topic
		parts    []store.Partition
	}
	victims := make([]victim, tenants)
	for i := range victims {
		tp, _ := newTopicValue(tens[i].ID, "victim", 3)
		parts := spreadPartitions(tp.ID, 0, 3, 3, 5, int32(i))
		require.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))
		victims[i] = victim{tens[i].ID, tp, parts}
	}
	requireLoad(t, s, nil, "before")

	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			ten := tens[g%tenants]
			tp, _ := newTopicValue(ten.ID, fmt.Sprintf("c-%02d", g), 3)
			parts := spreadPartitions(tp.ID, 0, 3, 3, 5, int32(g))
			assert.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))
		})
	}
	for i, v := range victims {
		wg.Go(func() {
			<-start
			// Grow, elect in a new partition, and either delete the topic
			// or leave it.
			_, err := s.AddPartitions(ctx, v.tenantID, v.topic.ID, 3, spreadPartitions("ignored", 3, 2, 3, 5, int32(i+1)), store.CountLimits{}, time.Now())
			if !assert.NoError(t, err) {
				return
			}
			p := v.parts[0]
			p.Leader, p.LeaderEpoch, p.PartitionEpoch = p.Replicas[1], 1, 1
			if !assert.NoError(t, s.UpdatePartition(ctx, p, 0)) {
				return
			}
			if i%2 == 0 {
				_, err := s.DeleteTopic(ctx, v.tenantID, v.topic.Name)
				assert.NoError(t, err)
			}
		})
	}
	close(start)
	wg.Wait()
	requireLoad(t, s, nil, "after")
	all, err := s.ListAllPartitions(ctx)
	require.NoError(t, err)
	require.Len(t, all, goroutines*3+tenants/2*5, "every creation and growth stored")
}

// BrokerLoadBackfill checks the broker load a migration computes for a
// store that already holds partitions (a cluster upgraded to counted
// load): it gives s partitions of several layouts (created, grown, led by
// another replica, offline, some deleted), calls remigrate, which must roll
// back the migration that introduced the counts and apply it again (its
// backfill then counts the partitions s holds), and requires PartitionLoad
// to equal a count of every partition.
func BrokerLoadBackfill(t *testing.T, s store.Store, remigrate func(t *testing.T)) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	for i := range int32(6) {
		tp, _ := newTopicValue(ten.ID, topicName("backfill", int(i)), 2+i)
		tp.ReplicationFactor = 1 + i%3
		parts := spreadPartitions(tp.ID, 0, tp.Partitions, tp.ReplicationFactor, 7, i)
		require.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))
		if i%2 == 1 {
			_, err := s.AddPartitions(ctx, ten.ID, tp.ID, tp.Partitions, spreadPartitions("ignored", tp.Partitions, 3, tp.ReplicationFactor, 7, i+2), store.CountLimits{}, at(time.Hour))
			require.NoError(t, err)
		}
		p := parts[0]
		switch i % 3 {
		case 1:
			p.Leader, p.LeaderEpoch, p.PartitionEpoch = p.Replicas[len(p.Replicas)-1], 1, 1
		case 2:
			p.Leader, p.ISR, p.PartitionEpoch = -1, nil, 1
		}
		if p.PartitionEpoch == 1 {
			require.NoError(t, s.UpdatePartition(ctx, p, 0))
		}
		if i == 4 {
			_, err := s.DeleteTopic(ctx, ten.ID, tp.Name)
			require.NoError(t, err)
		}
	}
	want := countLoad(t, s)
	require.Len(t, want, 7, "the layouts cover every broker")
	requireLoad(t, s, want, "maintained")
	remigrate(t)
	requireLoad(t, s, want, "backfilled")
}
