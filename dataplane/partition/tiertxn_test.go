package partition

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tiered"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
)

// fakeRemoteMeta is the control plane's remote segment metadata for one
// broker's tests: it accepts every copy.
type fakeRemoteMeta struct {
	mu   sync.Mutex
	segs []*sluicev1.RemoteSegment
	next int64
}

func (m *fakeRemoteMeta) AddRemoteSegment(_ context.Context, req *connect.Request[sluicev1.AddRemoteSegmentRequest]) (*connect.Response[sluicev1.AddRemoteSegmentResponse], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seg := proto.Clone(req.Msg.GetSegment()).(*sluicev1.RemoteSegment)
	seg.SegmentId = fmt.Sprintf("seg%d", len(m.segs))
	seg.ObjectKey = fmt.Sprintf("tenants/%s/topics/%s/%d/%020d-%d-%s", seg.GetTenantId(), seg.GetTopicId(), seg.GetPartition(), seg.GetBaseOffset(), seg.GetLeaderEpoch(), seg.SegmentId)
	seg.State = sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_STARTED
	m.segs = append(m.segs, seg)
	return connect.NewResponse(&sluicev1.AddRemoteSegmentResponse{Segment: proto.Clone(seg).(*sluicev1.RemoteSegment)}), nil
}

func (m *fakeRemoteMeta) UpdateRemoteSegment(_ context.Context, req *connect.Request[sluicev1.UpdateRemoteSegmentRequest]) (*connect.Response[sluicev1.UpdateRemoteSegmentResponse], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.segs {
		if s.GetSegmentId() == req.Msg.GetSegmentId() {
			s.State = req.Msg.GetState()
			if s.State == sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED {
				m.next = max(m.next, s.GetEndOffset()+1)
			}
			return connect.NewResponse(&sluicev1.UpdateRemoteSegmentResponse{Segment: proto.Clone(s).(*sluicev1.RemoteSegment)}), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("segment %s", req.Msg.GetSegmentId()))
}

func (m *fakeRemoteMeta) ListRemoteSegments(context.Context, *connect.Request[sluicev1.ListRemoteSegmentsRequest]) (*connect.Response[sluicev1.ListRemoteSegmentsResponse], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := &sluicev1.ListRemoteSegmentsResponse{NextBaseOffset: -1}
	if m.next > 0 {
		res.NextBaseOffset = m.next
	}
	for _, s := range m.segs {
		res.Segments = append(res.Segments, proto.Clone(s).(*sluicev1.RemoteSegment))
	}
	return connect.NewResponse(res), nil
}

// tieredLeader opens a tiered replica that leads alone, its log rolling
// every 4 KiB, with an object store in a folder, keeping no closed
// segment locally once it is copied.
func tieredLeader(t *testing.T) *Replica {
	p, _, _ := tieredLeaderClock(t)
	return p
}

// tieredLeaderClock is tieredLeader with its Tier's clock (moved by
// adding to the returned offset) and object store.
func tieredLeaderClock(t *testing.T) (*Replica, *atomic.Int64, *folder.Store) {
	t.Helper()
	store, err := folder.New(t.TempDir())
	require.NoError(t, err)
	skew := new(atomic.Int64)
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	tier, err := tiered.New(tiered.Config{Store: store, Meta: &fakeRemoteMeta{}, BrokerID: 1, BrokerEpoch: func() int64 { return 1 }, CacheDir: t.TempDir(), Now: now})
	require.NoError(t, err)
	t.Cleanup(func() { tier.Close() })
	h := newTestHost(t)
	h.SegmentBytes, h.Tier = 4096, tier
	cfg := TopicConfig{MinISR: 1, LocalRetentionBytes: 1}
	p, err := Open(h, Spec{TenantID: "t1", TopicID: "topic-1", Partition: 0, Dir: t.TempDir(), Config: cfg, Tiered: true})
	require.NoError(t, err)
	t.Cleanup(func() { p.log.Close() })
	p.Update(context.Background(), Assignment{Replicas: []int32{1}, Leader: 1, LeaderEpoch: 0, ISR: []int32{1}}, cfg)
	require.Equal(t, RoleLeader, p.Status().Role)
	return p, skew, store
}

// produceValue appends one batch of one record with value v: plain, or
// producer pid's transactional batch at epoch 0 and sequence seq.
func produceValue(t *testing.T, p *Replica, pid int64, seq int32, v string) {
	t.Helper()
	h := record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	if pid >= 0 {
		h.Attributes, h.ProducerID, h.ProducerEpoch, h.BaseSequence = record.AttrTransactional, pid, 0, seq
	}
	b, err := log.EncodeLeaderBatch(nil, h, []record.Record{{Value: []byte(v)}})
	require.NoError(t, err)
	if pid >= 0 {
		_, err = p.ProduceTransactional(context.Background(), []log.ValidBatch{b}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil, (&verifier{}).verify)
	} else {
		_, err = p.Produce(context.Background(), []log.ValidBatch{b}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	}
	require.NoError(t, err)
}

// readAll reads p from offset 0 to its end with the isolation given and
// returns the values.
func readAll(t *testing.T, p *Replica, readCommitted bool) []string {
	t.Helper()
	var out []string
	for off := int64(0); off < p.LastStableOffset(); {
		f, err := p.FetchRecords(context.Background(), off, FetchOptions{MaxBytes: 1 << 20, ReadCommitted: readCommitted})
		require.NoError(t, err, "fetch at %d", off)
		require.Greater(t, f.Next, off)
		for data := f.Data; len(data) > 0; {
			b, rest, err := record.ReadBatch(data)
			require.NoError(t, err)
			require.False(t, b.Header().Attributes.Control())
			it, err := b.Records()
			require.NoError(t, err)
			for it.Next() {
				out = append(out, string(it.Record().Value))
			}
			data = rest
		}
		off = f.Next
	}
	return out
}

// fillTiered writes, through several segments, plain records, an aborted
// transaction of producer 9 and a committed one of producer 11
// interleaved with them, then copies every closed segment to the object
// store with src (the replica's own source unless given) and deletes them
// locally. It returns the values read_committed must see.
func fillTiered(t *testing.T, p *Replica, src func(tiered.Source) tiered.Source) []string {
	t.Helper()
	var committed []string
	var lastMarker int64
	pad := strings.Repeat("p", 600)
	for i := range 40 {
		v := fmt.Sprintf("plain-%02d-%s", i, pad)
		produceValue(t, p, -1, 0, v)
		committed = append(committed, v)
		switch {
		case i >= 5 && i < 15:
			produceValue(t, p, 9, int32(i-5), fmt.Sprintf("aborted-%02d", i))
			produceValue(t, p, 11, int32(i-5), fmt.Sprintf("committed-%02d", i))
			committed = append(committed, fmt.Sprintf("committed-%02d", i))
		case i == 20:
			_, err := p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 1}, 10*time.Second)
			require.NoError(t, err)
		case i == 25:
			off, err := p.WriteMarker(context.Background(), Marker{ProducerID: 11, ProducerEpoch: 1, Commit: true}, 10*time.Second)
			require.NoError(t, err)
			lastMarker = off
		}
	}
	require.NoError(t, p.log.Roll())
	lead, ok := p.TierLeader()
	require.True(t, ok)
	if src != nil {
		_, err := p.h.Tier.Copy(context.Background(), lead.tp, src(tierSource{p.log, p}), lead.below)
		require.NoError(t, err)
	}
	p.CopyToTier(context.Background(), lead)
	n, err := p.ApplyRetention()
	require.NoError(t, err)
	require.Positive(t, n)
	require.Greater(t, p.log.LogStartOffset(), lastMarker, "the transactions are in the object store only")
	return committed
}

// TestPartitionReadCommittedFromTheObjectStore: the segments copied to
// the object store carry their aborted transactions (.txnindex), so a
// read_committed read of them drops the aborted batches once no replica
// keeps them in memory, and also on a replica that started its log over;
// read_uncommitted returns them.
func TestPartitionReadCommittedFromTheObjectStore(t *testing.T) {
	t.Parallel()
	p, skew, store := tieredLeaderClock(t)
	committed := fillTiered(t, p, nil)
	// The leader's sweep of orphaned objects, long after the copies, keeps
	// the indexes.
	skew.Store(int64(time.Hour))
	lead, _ := p.TierLeader()
	p.CopyToTier(context.Background(), lead)
	n := 0
	for info, err := range store.List(context.Background(), "") {
		require.NoError(t, err)
		if strings.HasSuffix(info.Key, ".txnindex") {
			n++
		}
	}
	require.Positive(t, n, "the sweep left the .txnindex objects")
	p.mu.Lock()
	require.Empty(t, p.pstate.AbortedTransactions(0, p.log.LEO()), "dropped below the log start: the index has them")
	p.mu.Unlock()

	require.Equal(t, committed, readAll(t, p, true))
	all := readAll(t, p, false)
	require.Contains(t, all, "aborted-05")
	require.Len(t, all, len(committed)+10)

	// As on a replica that started its log over at its log start.
	p.mu.Lock()
	require.NoError(t, p.setAbortedKnownLocked(p.log.LogStartOffset()))
	p.mu.Unlock()
	require.Equal(t, committed, readAll(t, p, true))
}

// TestPartitionReadCommittedRefusedBelowWhatTheReplicaKnows: remote
// segments without an aborted-transaction index (copied from a source
// without one) are filtered with the replica's in-memory list; a replica
// that started over without that history (its log Reset to its leader's
// log start) knows the aborted transactions only from there, so as leader
// it refuses read_committed reads of such segments below it (Unavailable)
// rather than return their aborted records; read_uncommitted is served,
// and the bound survives a restart.
func TestPartitionReadCommittedRefusedBelowWhatTheReplicaKnows(t *testing.T) {
	t.Parallel()
	p := tieredLeader(t)
	type plain struct{ tiered.Source } // no TxnIndex
	fillTiered(t, p, func(s tiered.Source) tiered.Source { return plain{s} })
	start := p.log.LogStartOffset()

	p.mu.Lock()
	require.NoError(t, p.setAbortedKnownLocked(start))
	p.mu.Unlock()
	_, err := p.FetchRecords(context.Background(), 0, FetchOptions{MaxBytes: 1 << 20, ReadCommitted: true})
	require.Equal(t, connect.CodeUnavailable, codeOf(err), "%v", err)
	require.ErrorContains(t, err, fmt.Sprintf("knows the partition's aborted transactions only from offset %d", start))
	require.Contains(t, readAll(t, p, false), "aborted-05")

	require.NoError(t, p.log.Close())
	p2, err := Open(p.h, Spec{TenantID: "t1", TopicID: "topic-1", Partition: 0, Dir: p.dir, Config: p.cfg, Tiered: true})
	require.NoError(t, err)
	t.Cleanup(func() { p2.log.Close() })
	require.Equal(t, start, p2.abortedKnown)
}

// TestPartitionLogResetBoundsWhatIsKnown: a follower whose log starts over
// at its leader's log start records that it knows aborted transactions
// from there only.
func TestPartitionLogResetBoundsWhatIsKnown(t *testing.T) {
	t.Parallel()
	p := open(t, newTestHost(t), TopicConfig{MinISR: 1})
	var err error
	p.mu.Lock()
	p.role = RoleFollower
	p.meta = Assignment{Replicas: []int32{1, 2}, Leader: 2, LeaderEpoch: 3, ISR: []int32{1, 2}}
	p.fol, err = replica.NewFollower(replica.FollowerParams{Self: 1, BrokerEpoch: 1, Leader: 2, LeaderEpoch: 3})
	p.mu.Unlock()
	require.NoError(t, err)
	require.NoError(t, applyNext(p, &sluicev1.FetchReplicaResponse{LogStartOffset: 10, HighWatermark: 10}))
	require.EqualValues(t, 10, p.log.LogStartOffset())
	require.EqualValues(t, 10, p.abortedKnown)
	got, err := readAbortedKnown(p.dir)
	require.NoError(t, err)
	require.EqualValues(t, 10, got)
}
