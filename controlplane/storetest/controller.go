package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/internal/testenv"
)

// ---- controller lease ----

func testControllerLeaseAcquire(t *testing.T, s store.Store) {
	ctx := t.Context()
	const ttl = 3 * time.Second

	// First holder: epoch 1.
	l, ok, err := s.AcquireControllerLease(ctx, "a", at(0), ttl)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.ControllerLease{Holder: "a", Epoch: 1, ExpiresAt: ms(at(ttl))}, l)
	requireUTC(t, l.ExpiresAt)
	require.True(t, l.Held(at(ttl-time.Millisecond)))
	require.False(t, l.Held(at(ttl)))

	// Renewal keeps the epoch and extends the lease.
	l, ok, err = s.AcquireControllerLease(ctx, "a", at(time.Second), ttl)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.ControllerLease{Holder: "a", Epoch: 1, ExpiresAt: ms(at(time.Second + ttl))}, l)

	// A late renewal (an earlier now) never shortens the lease.
	l, ok, err = s.AcquireControllerLease(ctx, "a", at(500*time.Millisecond), ttl)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ms(at(time.Second+ttl)), l.ExpiresAt)

	// Another holder while the lease is held: refused, told who holds it.
	l, ok, err = s.AcquireControllerLease(ctx, "b", at(time.Second+ttl-time.Millisecond), ttl)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, store.ControllerLease{Holder: "a", Epoch: 1, ExpiresAt: ms(at(time.Second + ttl))}, l)

	// Expired (at exactly the expiry): the other holder takes it with a new epoch.
	l, ok, err = s.AcquireControllerLease(ctx, "b", at(time.Second+ttl), ttl)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.ControllerLease{Holder: "b", Epoch: 2, ExpiresAt: ms(at(time.Second + 2*ttl))}, l)

	// The deposed holder cannot renew.
	l, ok, err = s.AcquireControllerLease(ctx, "a", at(time.Second+ttl+time.Millisecond), ttl)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, "b", l.Holder)
	require.EqualValues(t, 2, l.Epoch)

	// A holder re-acquiring its own expired lease (nobody took it meanwhile) keeps its epoch.
	l, ok, err = s.AcquireControllerLease(ctx, "b", at(time.Hour), ttl)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.ControllerLease{Holder: "b", Epoch: 2, ExpiresAt: ms(at(time.Hour + ttl))}, l)

	// And back to a: epoch 3.
	l, ok, err = s.AcquireControllerLease(ctx, "a", at(2*time.Hour), ttl)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 3, l.Epoch)

	// Bad requests are errors, not sentinels, and change nothing.
	for _, bad := range []struct {
		holder string
		ttl    time.Duration
	}{{"", ttl}, {"c", 0}, {"c", -time.Second}} {
		_, _, err := s.AcquireControllerLease(ctx, bad.holder, at(3*time.Hour), bad.ttl)
		require.Error(t, err)
		require.False(t, isSentinel(err), "%v", err)
	}
	l, ok, err = s.AcquireControllerLease(ctx, "a", at(2*time.Hour), ttl)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 3, l.Epoch)
}

// isSentinel reports whether err is one of the store's sentinels.
func isSentinel(err error) bool {
	for _, s := range []error{store.ErrNotFound, store.ErrAlreadyExists, store.ErrConflict, store.ErrLimitExceeded} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func testPartitionUpdateFenced(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "fenced", 3)

	// No controller yet: epoch 0 is the lease's, any other is fenced.
	p := parts[0]
	p.PartitionEpoch = 1
	require.ErrorIs(t, s.UpdatePartitionFenced(ctx, p, 0, 1), store.ErrFenced)

	l, ok, err := s.AcquireControllerLease(ctx, "ctl-a", at(0), time.Second)
	require.NoError(t, err)
	require.True(t, ok)

	p = parts[0]
	p.Leader, p.LeaderEpoch, p.PartitionEpoch = p.Replicas[1], 1, 1
	p.ISR = []int32{p.Replicas[1], p.Replicas[2]}
	require.NoError(t, s.UpdatePartitionFenced(ctx, p, 0, l.Epoch))
	got, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	want := append([]store.Partition(nil), parts...)
	want[0] = p
	require.Equal(t, want, got)

	// Stale partition epoch: a conflict, but not a fencing.
	stale := p
	stale.Leader = p.Replicas[2]
	err = s.UpdatePartitionFenced(ctx, stale, 0, l.Epoch)
	require.ErrorIs(t, err, store.ErrConflict)
	require.NotErrorIs(t, err, store.ErrFenced)

	// The new epoch must be expected+1: anything else is refused as invalid.
	skip := p
	skip.PartitionEpoch = 3
	err = s.UpdatePartitionFenced(ctx, skip, 1, l.Epoch)
	require.Error(t, err)
	require.False(t, isSentinel(err), "%v", err)
	same := p
	err = s.UpdatePartitionFenced(ctx, same, 1, l.Epoch)
	require.Error(t, err)
	require.False(t, isSentinel(err), "%v", err)

	// Unknown partitions.
	missing := p
	missing.Partition, missing.PartitionEpoch = 9, 2
	require.ErrorIs(t, s.UpdatePartitionFenced(ctx, missing, 1, l.Epoch), store.ErrNotFound)
	missing.TopicID, missing.Partition = "not-a-uuid", 0
	require.ErrorIs(t, s.UpdatePartitionFenced(ctx, missing, 1, l.Epoch), store.ErrNotFound)

	// Another replica takes over: the deposed controller's writes are fenced,
	// even with a correct partition epoch; the new one's go through.
	l2, ok, err := s.AcquireControllerLease(ctx, "ctl-b", at(time.Minute), time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, l.Epoch+1, l2.Epoch)
	next := p
	next.Leader, next.LeaderEpoch, next.PartitionEpoch = p.Replicas[2], 2, 2
	err = s.UpdatePartitionFenced(ctx, next, 1, l.Epoch)
	require.ErrorIs(t, err, store.ErrFenced)
	require.ErrorIs(t, err, store.ErrConflict, "ErrFenced is a conflict")
	got, err = s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, want, got, "the fenced write changed nothing")
	// A future epoch is not the lease's either.
	require.ErrorIs(t, s.UpdatePartitionFenced(ctx, next, 1, l2.Epoch+1), store.ErrFenced)
	require.NoError(t, s.UpdatePartitionFenced(ctx, next, 1, l2.Epoch))
	got, err = s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	want[0] = next
	require.Equal(t, want, got)

	// Offline: leader -1 is storable.
	off := next
	off.Leader, off.LeaderEpoch, off.PartitionEpoch = -1, 3, 3
	require.NoError(t, s.UpdatePartitionFenced(ctx, off, 2, l2.Epoch))
	got, err = s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, off, got[0])
}

func testPartitionListAll(t *testing.T, s store.Store) {
	ctx := t.Context()
	all, err := s.ListAllPartitions(ctx)
	require.NoError(t, err)
	require.Empty(t, all)

	ten1, _ := createTenant(t, s)
	ten2, _ := createTenant(t, s)
	tB, partsB := createTopic(t, s, ten1.ID, "b", 2)
	tA, partsA := createTopic(t, s, ten1.ID, "a", 3)
	tC, partsC := createTopic(t, s, ten2.ID, "c", 1)
	createTopic(t, s, ten2.ID, "gone", 2)
	_, err = s.DeleteTopic(ctx, ten2.ID, "gone")
	require.NoError(t, err)
	// A changed partition reads back changed.
	off := partsA[2]
	off.Leader, off.LeaderEpoch, off.ISR, off.PartitionEpoch = -1, 1, nil, 1
	require.NoError(t, s.UpdatePartition(ctx, off, 0))
	partsA[2] = off

	with := func(tp store.Topic, parts []store.Partition) []store.PartitionWithTopic {
		out := make([]store.PartitionWithTopic, len(parts))
		for i, p := range parts {
			out[i] = store.PartitionWithTopic{Partition: p, TenantID: tp.TenantID, TopicName: tp.Name, Config: tp.Config}
		}
		return out
	}
	var want []store.PartitionWithTopic
	// Ordered by tenant id, then topic name, then partition.
	if ten1.ID < ten2.ID {
		want = append(append(append(want, with(tA, partsA)...), with(tB, partsB)...), with(tC, partsC)...)
	} else {
		want = append(append(append(want, with(tC, partsC)...), with(tA, partsA)...), with(tB, partsB)...)
	}
	all, err = s.ListAllPartitions(ctx)
	require.NoError(t, err)
	require.Equal(t, want, all)
}

// testPartitionListTopics: ListTopicsPartitions reads the partitions of the
// topics named, of any tenant, as ListAllPartitions does, and skips what
// names no topic.
func testPartitionListTopics(t *testing.T, s store.Store) {
	ctx := t.Context()
	got, err := s.ListTopicsPartitions(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)

	ten1, _ := createTenant(t, s)
	ten2, _ := createTenant(t, s)
	tB, _ := createTopic(t, s, ten1.ID, "b", 2)
	tA, _ := createTopic(t, s, ten1.ID, "a", 3)
	tC, _ := createTopic(t, s, ten2.ID, "c", 1)
	createTopic(t, s, ten2.ID, "not-named", 2)
	gone, _ := createTopic(t, s, ten2.ID, "gone", 2)
	_, err = s.DeleteTopic(ctx, ten2.ID, "gone")
	require.NoError(t, err)
	// A changed partition reads back changed.
	parts, err := s.ListPartitions(ctx, tA.ID)
	require.NoError(t, err)
	off := parts[2]
	off.Leader, off.LeaderEpoch, off.ISR, off.PartitionEpoch = -1, 1, nil, 1
	require.NoError(t, s.UpdatePartition(ctx, off, 0))

	all, err := s.ListAllPartitions(ctx)
	require.NoError(t, err)
	named := map[string]bool{tA.ID: true, tB.ID: true, tC.ID: true}
	var want []store.PartitionWithTopic
	for _, p := range all { // in ListAllPartitions order
		if named[p.TopicID] {
			want = append(want, p)
		}
	}
	require.Len(t, want, 6)
	got, err = s.ListTopicsPartitions(ctx, []string{
		tC.ID, strings.ToUpper(tA.ID), tB.ID, tA.ID, // any case, any order, repeated
		gone.ID, store.NewID(), "not-a-uuid", "",
	})
	require.NoError(t, err)
	require.Equal(t, want, got)

	got, err = s.ListTopicsPartitions(ctx, []string{gone.ID, "not-a-uuid"})
	require.NoError(t, err)
	require.Empty(t, got)
}

func testMetadataVersion(t *testing.T, s store.Store) {
	ctx := t.Context()
	v, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, v)

	last := v
	bumped := func(what string) {
		t.Helper()
		v, err := s.MetadataVersion(ctx)
		require.NoError(t, err)
		require.Greater(t, v, last, "%s must bump the metadata version", what)
		last = v
	}
	unchanged := func(what string) {
		t.Helper()
		v, err := s.MetadataVersion(ctx)
		require.NoError(t, err)
		require.Equal(t, last, v, "%s must not bump the metadata version", what)
	}

	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "v", 3)
	bumped("CreateTopic")
	_, err = s.UpdateTopicConfig(ctx, ten.ID, "v", at(time.Hour), func(cur store.Topic) (store.TopicConfig, error) {
		c := cur.Config
		c.RetentionMs = 1000
		return c, nil
	})
	require.NoError(t, err)
	bumped("UpdateTopicConfig")
	_, err = s.AddPartitions(ctx, ten.ID, tp.ID, 3, newPartitionValues(tp.ID, 3, 1, tp.ReplicationFactor), store.CountLimits{}, at(time.Hour))
	require.NoError(t, err)
	bumped("AddPartitions")
	_, err = s.AddPartitions(ctx, ten.ID, tp.ID, 3, newPartitionValues(tp.ID, 3, 1, tp.ReplicationFactor), store.CountLimits{}, at(time.Hour))
	require.ErrorIs(t, err, store.ErrConflict)
	unchanged("a refused AddPartitions")
	p := parts[0]
	p.ISR, p.PartitionEpoch = p.Replicas[:1], 1
	require.NoError(t, s.UpdatePartition(ctx, p, 0))
	bumped("UpdatePartition")
	require.ErrorIs(t, s.UpdatePartition(ctx, p, 0), store.ErrConflict)
	unchanged("a lost UpdatePartition")

	l, ok, err := s.AcquireControllerLease(ctx, "ctl", at(0), time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	unchanged("AcquireControllerLease")
	p.PartitionEpoch = 2
	require.NoError(t, s.UpdatePartitionFenced(ctx, p, 1, l.Epoch))
	bumped("UpdatePartitionFenced")
	p.PartitionEpoch = 3
	require.ErrorIs(t, s.UpdatePartitionFenced(ctx, p, 2, l.Epoch+1), store.ErrFenced)
	unchanged("a fenced UpdatePartitionFenced")

	b, err := s.RegisterBroker(ctx, store.Broker{ID: 1, Address: "127.0.0.1:9001", LeaseExpiresAt: at(time.Second)})
	require.NoError(t, err)
	bumped("RegisterBroker (first)")
	_, err = s.HeartbeatBroker(ctx, 1, b.Epoch, at(time.Minute))
	require.NoError(t, err)
	unchanged("HeartbeatBroker")
	_, err = s.RegisterBroker(ctx, store.Broker{ID: 1, Address: "127.0.0.1:9001", LeaseExpiresAt: at(time.Second)})
	require.NoError(t, err)
	bumped("RegisterBroker (again)")

	// Remote segments are not cluster metadata.
	f := store.LeaderFence{BrokerID: 1, BrokerEpoch: b.Epoch + 1, LeaderEpoch: p.LeaderEpoch}
	require.Equal(t, int32(1), p.Leader)
	seg, err := s.AddRemoteSegment(ctx, f, store.RemoteSegment{
		ID: store.NewID(), TenantID: ten.ID, TopicID: tp.ID, Partition: 0, BaseOffset: 0, EndOffset: 9,
		LeaderEpoch: f.LeaderEpoch, SizeBytes: 1000, MaxTimestampMs: -1, ObjectKey: "k",
		Epochs: []store.EpochStart{{Epoch: f.LeaderEpoch, StartOffset: 0}},
	})
	require.NoError(t, err)
	unchanged("AddRemoteSegment")
	_, err = s.UpdateRemoteSegmentState(ctx, f, tp.ID, 0, seg.ID, store.RemoteCopyFinished, at(time.Hour))
	require.NoError(t, err)
	unchanged("UpdateRemoteSegmentState")

	_, err = s.DeleteTopic(ctx, ten.ID, tp.Name)
	require.NoError(t, err)
	bumped("DeleteTopic")
}

// ---- concurrency ----

// ControllerLeaseContest races holders for the controller lease across the
// given stores (several handles on one database, as control-plane replicas
// have; one store repeated works too) and proves it is never held by two:
//
//   - each epoch has exactly one holder, and the epochs granted are 1..n;
//   - a holder's takeover (its first grant in an epoch, at its now) comes no
//     earlier than every expiry granted in the epoch before.
//
// Each holder is one goroutine reading a shared, increasing fake clock, as a
// controller reads its own clock; the lease is short against the clock's
// steps, so it changes hands many times.
func ControllerLeaseContest(t *testing.T, stores []store.Store) {
	const (
		holders = 6
		rounds  = 60
		ttl     = 100 * time.Millisecond
	)
	type grant struct {
		holder        string
		epoch         int64
		now, expireAt time.Time
	}
	var (
		clock  atomic.Int64 // milliseconds after base
		mu     sync.Mutex
		grants []grant
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	for h := range holders {
		s := stores[h%len(stores)]
		holder := "holder-" + string(rune('a'+h))
		wg.Go(func() {
			<-start
			for range rounds {
				now := at(time.Duration(clock.Add(rand.Int64N(40))) * time.Millisecond)
				l, ok, err := s.AcquireControllerLease(t.Context(), holder, now, ttl)
				if !assertNoError(t, err) {
					return
				}
				if !ok {
					assert.NotEqual(t, holder, l.Holder, "refused although holding")
					assert.True(t, l.Held(now) || l.Holder == "", "refused while the lease had expired: %+v at %v", l, now)
					continue
				}
				assert.Equal(t, holder, l.Holder)
				mu.Lock()
				grants = append(grants, grant{holder, l.Epoch, now, l.ExpiresAt})
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	require.False(t, t.Failed())

	holderOf := map[int64]string{}
	firstGrant := map[int64]time.Time{}
	lastExpiry := map[int64]time.Time{}
	var maxEpoch int64
	for _, g := range grants {
		if h, ok := holderOf[g.epoch]; ok {
			require.Equal(t, h, g.holder, "epoch %d granted to two holders", g.epoch)
		}
		holderOf[g.epoch] = g.holder
		if f, ok := firstGrant[g.epoch]; !ok || g.now.Before(f) {
			firstGrant[g.epoch] = g.now
		}
		if g.expireAt.After(lastExpiry[g.epoch]) {
			lastExpiry[g.epoch] = g.expireAt
		}
		maxEpoch = max(maxEpoch, g.epoch)
	}
	for e := int64(1); e <= maxEpoch; e++ {
		require.Contains(t, holderOf, e, "epoch %d never granted", e)
		if e > 1 {
			require.False(t, firstGrant[e].Before(lastExpiry[e-1].Truncate(time.Millisecond)),
				"epoch %d (%s) taken at %v, before epoch %d (%s) expired at %v",
				e, holderOf[e], firstGrant[e], e-1, holderOf[e-1], lastExpiry[e-1])
		}
	}
	require.GreaterOrEqual(t, maxEpoch, int64(3), "the lease should have changed hands a few times")
	t.Logf("%d grants over %d epochs", len(grants), maxEpoch)
}

func testConcurrentControllerLease(t *testing.T, s store.Store) {
	ControllerLeaseContest(t, []store.Store{s})
}

// testConcurrentFencedTakeover: a controller keeps writing a partition while
// another replica takes the lease over. Once the takeover has returned, no
// write of the old epoch succeeds, and each partition epoch is won once.
func testConcurrentFencedTakeover(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, ten.ID, "takeover", 1)
	old, ok, err := s.AcquireControllerLease(ctx, "old", at(0), time.Second)
	require.NoError(t, err)
	require.True(t, ok)

	var (
		takenOver  atomic.Bool
		lateWins   atomic.Int32
		fenced     atomic.Int32
		oldWins    atomic.Int32
		afterCount atomic.Int32
		wg         sync.WaitGroup
	)
	write := func(epoch int64, leader int32) (bool, error) {
		parts, err := s.ListPartitions(ctx, tp.ID)
		if err != nil {
			return false, err
		}
		p := parts[0]
		expected := p.PartitionEpoch
		p.PartitionEpoch, p.Leader = expected+1, leader
		err = s.UpdatePartitionFenced(ctx, p, expected, epoch)
		return err == nil, err
	}
	for w := range 4 {
		wg.Go(func() {
			for afterCount.Load() < 50 {
				after := takenOver.Load()
				won, err := write(old.Epoch, int32(w))
				switch {
				case won && after:
					lateWins.Add(1)
				case won:
					oldWins.Add(1)
				case errors.Is(err, store.ErrFenced):
					fenced.Add(1)
				case errors.Is(err, store.ErrConflict):
				default:
					t.Errorf("write: %v", err)
					return
				}
				if after {
					afterCount.Add(1)
				}
			}
		})
	}
	// Let the old controller win a few writes, then take over.
	testenv.Wait(t, 10*time.Second, "the old controller winning 5 writes", func() error {
		if n := oldWins.Load(); n < 5 {
			return fmt.Errorf("%d won", n)
		}
		return nil
	})
	nu, ok, err := s.AcquireControllerLease(ctx, "new", at(2*time.Second), time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, old.Epoch+1, nu.Epoch)
	takenOver.Store(true)
	for {
		won, err := write(nu.Epoch, 100)
		if won {
			break
		}
		require.ErrorIs(t, err, store.ErrConflict)
		require.NotErrorIs(t, err, store.ErrFenced)
	}
	wg.Wait()
	require.Zero(t, lateWins.Load(), "the deposed controller wrote after the takeover")
	require.Positive(t, fenced.Load())
	parts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.EqualValues(t, 100, parts[0].Leader, "the new controller's write is the last")
	require.EqualValues(t, oldWins.Load()+1, parts[0].PartitionEpoch, "every partition epoch won exactly once")
}
