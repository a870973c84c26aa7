package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Benchmark measures a driver's hot paths on s, an empty store: topic
// creation (limit check included), the partition compare-and-set of the
// controller, alone and batched (500 per transaction), broker heartbeats
// and API-key lookups (authentication).
func Benchmark(b *testing.B, s store.Store) {
	b.Run("CreateTopic", func(b *testing.B) {
		// A tenant holds at most 100 topics (a plan-sized count to check), then the next one takes over.
		limits := store.CountLimits{MaxTopics: 100, MaxPartitions: 300}
		var ten store.Tenant
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%100 == 0 {
				b.StopTimer()
				ten, _ = createTenant(b, s)
				b.StartTimer()
			}
			tp, parts := newTopicValue(ten.ID, fmt.Sprintf("bench-%d", i), 3)
			i++
			if err := s.CreateTopic(b.Context(), tp, parts, limits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("UpdatePartition", func(b *testing.B) {
		ten, _ := createTenant(b, s)
		_, parts := createTopic(b, s, ten.ID, "cas", 1)
		p := parts[0]
		b.ReportAllocs()
		for b.Loop() {
			p.PartitionEpoch++
			p.LeaderEpoch++
			if err := s.UpdatePartition(b.Context(), p, p.PartitionEpoch-1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("UpdatePartitions500", func(b *testing.B) {
		// One batch of 500 compare-and-sets (the controller's batch size), to
		// set against 500 UpdatePartition calls.
		ten, _ := createTenant(b, s)
		_, parts := createTopic(b, s, ten.ID, "cas-batch", 500)
		updates := make([]store.PartitionUpdate, len(parts))
		for i, p := range parts {
			updates[i] = store.PartitionUpdate{Partition: p}
		}
		b.ReportAllocs()
		for b.Loop() {
			for i := range updates {
				u := &updates[i]
				u.ExpectedEpoch = u.Partition.PartitionEpoch
				u.Partition.PartitionEpoch++
				u.Partition.LeaderEpoch++
			}
			out, err := s.UpdatePartitions(b.Context(), updates)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range out {
				if e != nil {
					b.Fatal(e)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(updates)), "ns/partition")
	})
	b.Run("HeartbeatBroker", func(b *testing.B) {
		br, err := s.RegisterBroker(b.Context(), store.Broker{ID: 1, Address: "127.0.0.1:9001", LeaseExpiresAt: time.Now()})
		require.NoError(b, err)
		lease := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			lease = lease.Add(time.Millisecond)
			if _, err := s.HeartbeatBroker(b.Context(), br.ID, br.Epoch, lease); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetAPIKeyParallel", func(b *testing.B) {
		_, key := createTenant(b, s)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.GetAPIKey(b.Context(), key.ID); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkPlacement measures what the store costs the placement of one new
// topic as the cluster grows: the broker load (PartitionLoad, read by every
// CreateTopic and CreatePartitions of the API) and then the creation of a
// topic of 3 partitions, on a store that already holds 300 and 3000
// partitions (RF 3, topics of 3 partitions, 100 topics a tenant). The new
// topic is deleted again outside the timer, so every iteration sees the
// same count. newStore returns an empty, migrated store (one per size).
// The cost should not grow with the partitions held.
func BenchmarkPlacement(b *testing.B, newStore func(b *testing.B) store.Store) {
	for _, held := range []int{300, 3000} {
		b.Run(fmt.Sprintf("partitions=%d", held), func(b *testing.B) {
			s := newStore(b)
			ctx := b.Context()
			var ten store.Tenant
			for i := range held / 3 {
				if i%100 == 0 {
					ten, _ = createTenant(b, s)
				}
				createTopic(b, s, ten.ID, topicName("held", i), 3)
			}
			ten, _ = createTenant(b, s)
			limits := store.CountLimits{MaxTopics: 100, MaxPartitions: 300}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				load, err := s.PartitionLoad(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(load) != 3 {
					b.Fatalf("load over %d brokers, want 3", len(load))
				}
				tp, parts := newTopicValue(ten.ID, topicName("new", i), 3)
				i++
				if err := s.CreateTopic(ctx, tp, parts, limits); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := s.DeleteTopic(ctx, ten.ID, tp.Name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkPartitionReads measures the partition reads of the control
// plane's rounds on s, an empty store, filled with 6,000 partitions (2,000
// topics of 3, RF 3): every partition (ListAllPartitions: a snapshot of a
// WatchAssignments stream, the controller's at activation), the partitions
// of 300 topics (ListTopicsPartitions: a leader's AlterPartitions batch),
// and what changed since the version before one partition's ISR change
// (MetadataChangesSince: a round of the controller and of each stream).
func BenchmarkPartitionReads(b *testing.B, s store.Store) {
	ctx := b.Context()
	var (
		ten   store.Tenant
		ids   []string
		first store.Partition
	)
	for i := range 2000 {
		if i%100 == 0 {
			ten, _ = createTenant(b, s)
		}
		tp, parts := createTopic(b, s, ten.ID, topicName("read", i), 3)
		ids = append(ids, tp.ID)
		if i == 0 {
			first = parts[0]
		}
	}
	b.Run("ListAllPartitions", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			all, err := s.ListAllPartitions(ctx)
			if err != nil || len(all) != 6000 {
				b.Fatal(len(all), err)
			}
		}
	})
	b.Run("ListTopicsPartitions300", func(b *testing.B) {
		named := make([]string, 0, 300)
		for i := range 300 {
			named = append(named, ids[i*len(ids)/300])
		}
		b.ReportAllocs()
		for b.Loop() {
			got, err := s.ListTopicsPartitions(ctx, named)
			if err != nil || len(got) != 900 {
				b.Fatal(len(got), err)
			}
		}
	})
	b.Run("MetadataChangesSinceOne", func(b *testing.B) {
		p := first
		full := p.ISR
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			since, err := s.MetadataVersion(ctx)
			if err != nil {
				b.Fatal(err)
			}
			next := p
			next.PartitionEpoch++
			next.ISR = full[:2]
			if len(p.ISR) == 2 {
				next.ISR = full
			}
			if err := s.UpdatePartition(ctx, next, p.PartitionEpoch); err != nil {
				b.Fatal(err)
			}
			p = next
			b.StartTimer()
			ch, err := s.MetadataChangesSince(ctx, since)
			if err != nil || len(ch.Partitions) != 1 {
				b.Fatal(len(ch.Partitions), err)
			}
		}
	})
}
