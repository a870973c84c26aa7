package groups

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants/system"
)

// The service's tests run it without a broker: a view built by hand, the
// group coordinators on real logs in temp dirs (leading as the view says),
// and its other dependencies faked (the leaders' offsets and records, the
// peers' group lists, admission).

const self = 1

// leaderLog is an offsets partition this broker's replica leads at one
// epoch: a real log, acks=all being the leader's own append.
type leaderLog struct {
	*log.Log
	epoch int32
}

func (p *leaderLog) CheckLeader() error     { return nil }
func (p *leaderLog) Leads(epoch int32) bool { return epoch == p.epoch }

func (p *leaderLog) AppendAcksAll(_ context.Context, epoch int32, batch log.ValidBatch) (int64, error) {
	if epoch != p.epoch {
		return 0, errors.New("fenced")
	}
	base, _, err := p.AppendValidated(batch, epoch)
	return base, err
}

// fakeLeaders answer ListOffsets and Fetch from tables; a partition
// without offsets does not answer.
type fakeLeaders struct {
	mu      sync.Mutex
	offsets map[cluster.PartKey]Offsets
	// first is the first timestamp of the batch a fetch at any offset
	// below the partition's end reads.
	first map[cluster.PartKey]time.Time
	creds []Credentials
}

func (l *fakeLeaders) ListOffsets(_ context.Context, cred Credentials, t *cluster.Topic, pm cluster.Partition, spec OffsetSpec, ts int64) (Offsets, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.creds = append(l.creds, cred)
	o, ok := l.offsets[cluster.PartKey{TopicID: t.ID, Partition: pm.Partition}]
	if !ok {
		return Offsets{}, derr.New(derr.Unavailable, "no answer")
	}
	if spec == SpecTimestamp {
		o.Offset = -1
	}
	return o, nil
}

func (l *fakeLeaders) Fetch(_ context.Context, _ Credentials, t *cluster.Topic, pm cluster.Partition, offset int64, _ int32, _ bool) (Fetched, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := cluster.PartKey{TopicID: t.ID, Partition: pm.Partition}
	first, ok := l.first[k]
	if !ok {
		return Fetched{}, errors.New("no answer")
	}
	b, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: offset, FirstTimestamp: first.UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{{Value: []byte("v")}})
	if err != nil {
		return Fetched{}, err
	}
	return Fetched{Batches: b, NextOffset: offset + 1}, nil
}

// fakePeers answer ListGroups per broker.
type fakePeers struct {
	groups map[int32][]GroupSummary
	err    map[int32]error
}

func (p fakePeers) ListGroups(_ context.Context, broker int32, _ Credentials) ([]GroupSummary, error) {
	return p.groups[broker], p.err[broker]
}

// admitAll admits every group and counts the admissions.
type admitAll struct{ n int }

func (a *admitAll) AdmitGroup(context.Context, string, string) (func(), error) {
	a.n++
	return nil, nil
}

// setup is a service on broker 1 of a view with an offsets topic of
// offsetsLeaders' partitions and tenant t1's topic "orders" (2 partitions),
// with its fakes.
type setup struct {
	svc     *Service
	view    *cluster.View
	leaders *fakeLeaders
	peers   *fakePeers
	admit   *admitAll
	orders  *cluster.Topic
	now     time.Time
}

func newSetup(t *testing.T, lag bool, offsetsLeaders ...int32) *setup {
	t.Helper()
	view := cluster.EmptyView()
	view.Loaded = true
	for _, id := range []int32{1, 2, 3} {
		view.Brokers[id] = cluster.Node{ID: id, Address: fmt.Sprintf("b%d:9092", id)}
	}
	ot := &cluster.Topic{TenantID: system.TenantID, ID: "offsets-id", Name: system.OffsetsTopic}
	for i, l := range offsetsLeaders {
		ot.Partitions = append(ot.Partitions, cluster.Partition{TopicID: ot.ID, Partition: int32(i), Leader: l, LeaderEpoch: 3})
	}
	view.AddTopic(ot)
	orders := &cluster.Topic{TenantID: "t1", ID: "orders-id", Name: "orders", Partitions: []cluster.Partition{
		{TopicID: "orders-id", Partition: 0, Leader: 1}, {TopicID: "orders-id", Partition: 1, Leader: 2},
	}}
	view.AddTopic(orders)
	s := &setup{
		view: view, orders: orders, admit: &admitAll{}, peers: &fakePeers{},
		leaders: &fakeLeaders{offsets: map[cluster.PartKey]Offsets{}, first: map[cluster.PartKey]time.Time{}},
		now:     time.Now().Truncate(time.Millisecond),
	}
	// One loaded coordinator per offsets partition this broker leads, as
	// the broker's runtime keeps for one leader epoch.
	var mu sync.Mutex
	coords := map[int32]*coordinator.Coordinator{}
	host := func(_ context.Context, _ *cluster.Topic, pm cluster.Partition, mk func(coordinator.Partition, int32) *coordinator.Coordinator) (*coordinator.Coordinator, error) {
		if pm.Leader != self {
			return nil, view.NotLeader(self, pm)
		}
		mu.Lock()
		defer mu.Unlock()
		if c, ok := coords[pm.Partition]; ok {
			return c, nil
		}
		l, err := log.Open(t.TempDir(), log.Config{Flush: log.FlushOS})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		c := mk(&leaderLog{Log: l, epoch: pm.LeaderEpoch}, pm.LeaderEpoch)
		if err := c.Load(t.Context()); err != nil {
			return nil, err
		}
		t.Cleanup(c.Close)
		coords[pm.Partition] = c
		return c, nil
	}
	s.svc = New(Config{BrokerID: self, SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second, LagMetrics: lag}, Deps{
		View: func() *cluster.View { return view }, Host: host, Admission: s.admit, Leaders: s.leaders, Peers: s.peers,
		VerifyTransactionGroup: func(context.Context, Credentials, string, string, string, int64, int16, bool) error { return nil },
		Registerer:             prometheus.NewRegistry(),
		Now:                    func() time.Time { return s.now },
	})
	return s
}

// TestServiceRoutesToTheGroupsCoordinator: a call for a group another
// broker coordinates is refused with a NotCoordinatorError naming it,
// which the Connect API answers as NotLeader with its address; a group id
// is checked first; without a leader the hint is offline.
func TestServiceRoutesToTheGroupsCoordinator(t *testing.T) {
	t.Parallel()
	s := newSetup(t, false, 2)
	ctx := t.Context()
	err := s.svc.CommitOffsets(ctx, CommitRequest{TenantID: "t1", Group: "g", Offsets: []PartitionOffset{{Topic: "orders", Offset: 1}}})
	var nc *NotCoordinatorError
	require.ErrorAs(t, err, &nc)
	require.EqualValues(t, 2, nc.Leader.Leader)
	require.Equal(t, "b2:9092", nc.Leader.Address)
	ce := connecterr.ToConnect(err)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(ce), "%v", ce)
	var nl *derr.NotLeaderError
	require.ErrorAs(t, ce, &nl)

	c, err := s.svc.FindCoordinator("t1", "g")
	require.NoError(t, err)
	require.Equal(t, Coordinator{BrokerID: 2, Address: "b2:9092"}, c)

	_, err = s.svc.Heartbeat(ctx, HeartbeatRequest{TenantID: "t1", Group: ""})
	require.ErrorIs(t, err, derr.InvalidRequest)
	require.False(t, errors.As(err, &nc), "the group id is checked before the coordinator is looked for")

	offline := newSetup(t, false, -1)
	_, err = offline.svc.FetchOffsets(ctx, FetchOffsetsRequest{TenantID: "t1", Group: "g"})
	require.ErrorAs(t, err, &nc)
	require.ErrorIs(t, err, derr.LeaderNotAvailable)
	_, err = offline.svc.FindCoordinator("t1", "g")
	require.ErrorIs(t, err, derr.LeaderNotAvailable)

	none := newSetup(t, false)
	require.ErrorIs(t, none.svc.LeaveGroup(ctx, LeaveRequest{TenantID: "t1", Group: "g", MemberID: "m"}), derr.CoordinatorNotAvailable)
}

// TestServiceCommitsAndFetchesOffsets: a commit is checked against the
// partitions' high watermarks at their leaders, with the caller's
// credentials, and answered by FetchOffsets; the refusals name the field.
func TestServiceCommitsAndFetchesOffsets(t *testing.T) {
	t.Parallel()
	s := newSetup(t, false, self)
	ctx := t.Context()
	s.leaders.offsets[cluster.PartKey{TopicID: "orders-id", Partition: 0}] = Offsets{HighWatermark: 10}
	s.leaders.offsets[cluster.PartKey{TopicID: "orders-id", Partition: 1}] = Offsets{HighWatermark: 4}
	cred := Credentials{Authorization: "Bearer client"}
	commit := func(offsets ...PartitionOffset) error {
		return s.svc.CommitOffsets(ctx, CommitRequest{TenantID: "t1", Group: "g", Offsets: offsets, Credentials: cred})
	}
	err := commit(PartitionOffset{Topic: "orders", Partition: 1, Offset: 5})
	require.ErrorIs(t, err, derr.OffsetOutOfRange)
	require.EqualError(t, err, `offsets[0]: offset 5 is beyond the end of topic "orders" partition 1 (high watermark 4)`)
	err = commit(PartitionOffset{Topic: "orders", Offset: 1}, PartitionOffset{Topic: "nope"})
	require.ErrorIs(t, err, derr.UnknownTopicOrPartition)
	require.EqualError(t, err, `offsets[1]: topic "nope" not found`)
	require.ErrorIs(t, commit(), derr.InvalidRequest)
	require.ErrorIs(t, commit(PartitionOffset{Topic: "orders"}, PartitionOffset{Topic: "orders"}), derr.InvalidRequest)
	require.Zero(t, s.admit.n, "refused before the group is created")

	require.NoError(t, commit(PartitionOffset{Topic: "orders", Partition: 0, Offset: 7, LeaderEpoch: 2, Metadata: "m"}))
	require.Equal(t, 1, s.admit.n, "the new group was admitted")
	require.Contains(t, s.leaders.creds, cred, "the leaders are asked with the caller's credentials")

	all, err := s.svc.FetchOffsets(ctx, FetchOffsetsRequest{TenantID: "t1", Group: "g"})
	require.NoError(t, err)
	require.Equal(t, []PartitionOffset{{Topic: "orders", Partition: 0, Offset: 7, LeaderEpoch: 2, Metadata: "m"}}, all)
	named, err := s.svc.FetchOffsets(ctx, FetchOffsetsRequest{TenantID: "t1", Group: "g", Partitions: []TopicPartitions{{Topic: "orders", Partitions: []int32{1, 0}}}})
	require.NoError(t, err)
	require.Equal(t, []PartitionOffset{{Topic: "orders", Partition: 1, Offset: -1, LeaderEpoch: -1}, {Topic: "orders", Partition: 0, Offset: 7, LeaderEpoch: 2, Metadata: "m"}}, named)
	_, err = s.svc.FetchOffsets(ctx, FetchOffsetsRequest{TenantID: "t1", Group: "g", Partitions: []TopicPartitions{{Topic: "orders", Partitions: []int32{2}}}})
	require.ErrorIs(t, err, derr.InvalidRequest)

	// Another tenant's group of the same name is another group.
	other, err := s.svc.FetchOffsets(ctx, FetchOffsetsRequest{TenantID: "t2", Group: "g"})
	require.NoError(t, err)
	require.Empty(t, other)
}

// TestServiceMembersAndAdministration: a member's heartbeat gets its
// assignment; the group with members can be neither deleted nor reset
// (NonEmptyGroup, reason GroupActive) until it leaves; DescribeGroup shows
// the members and each partition's lag from its leader's offsets and the
// oldest unread record; an unknown group is GroupIDNotFound.
func TestServiceMembersAndAdministration(t *testing.T) {
	t.Parallel()
	s := newSetup(t, false, self)
	ctx := t.Context()
	s.leaders.offsets[cluster.PartKey{TopicID: "orders-id", Partition: 0}] = Offsets{LogStartOffset: 2, HighWatermark: 10, LastStableOffset: 10, PartitionSize: 1000}
	s.leaders.first[cluster.PartKey{TopicID: "orders-id", Partition: 0}] = s.now.Add(-time.Minute)

	_, err := s.svc.DescribeGroup(ctx, DescribeRequest{TenantID: "t1", Group: "g"})
	require.ErrorIs(t, err, derr.GroupIDNotFound)
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(connecterr.ToConnect(err)))

	hb, err := s.svc.Heartbeat(ctx, HeartbeatRequest{TenantID: "t1", Group: "g", Member: group.HeartbeatRequest{Subscriptions: []string{"orders"}}})
	require.NoError(t, err)
	require.NotEmpty(t, hb.MemberID)
	require.Equal(t, group.TopicPartitions{"orders": {0, 1}}, hb.Assignment)
	_, err = s.svc.Heartbeat(ctx, HeartbeatRequest{TenantID: "t1", Group: "g", Member: group.HeartbeatRequest{MemberID: "nobody", MemberEpoch: 1}})
	require.ErrorIs(t, err, derr.UnknownMemberID)

	err = s.svc.DeleteGroup(ctx, "t1", "g")
	require.ErrorIs(t, err, derr.NonEmptyGroup)
	require.Equal(t, `failed_precondition: group "g" has members: stop them first`, connecterr.ToConnect(err).Error())
	_, err = s.svc.ResetOffsets(ctx, ResetRequest{TenantID: "t1", Group: "g", Topic: "orders", Spec: SpecEarliest})
	require.ErrorIs(t, err, derr.NonEmptyGroup)
	reset, err := s.svc.ResetOffsets(ctx, ResetRequest{TenantID: "t1", Group: "g", Topic: "orders", Partitions: []int32{0, 0}, Spec: SpecOffset, Offset: 1, Force: true})
	require.NoError(t, err)
	require.Equal(t, []PartitionOffset{{Topic: "orders", Partition: 0, Offset: 2, LeaderEpoch: -1, Metadata: "reset"}}, reset, "clamped to the log start, each partition once")
	_, err = s.svc.ResetOffsets(ctx, ResetRequest{TenantID: "t1", Group: "g", Topic: "orders", Spec: 9, Force: true})
	require.EqualError(t, err, "spec: unknown value 9")

	d, err := s.svc.DescribeGroup(ctx, DescribeRequest{TenantID: "t1", Group: "g"})
	require.NoError(t, err)
	require.Len(t, d.Members, 1)
	require.Equal(t, hb.MemberID, d.Members[0].MemberID)
	require.Len(t, d.Partitions, 2)
	p0, p1 := d.Partitions[0], d.Partitions[1]
	require.Equal(t, PartitionLag{Topic: "orders", Partition: 0, CommittedOffset: 2, HighWatermark: 10, LogStartOffset: 2, Lag: 8, LagSeconds: 60, MemberID: hb.MemberID, PartitionBytes: 1000}, p0)
	require.Equal(t, PartitionLag{Topic: "orders", Partition: 1, CommittedOffset: -1, HighWatermark: -1, LogStartOffset: -1, Lag: -1, MemberID: hb.MemberID}, p1, "its leader does not answer")

	require.NoError(t, s.svc.LeaveGroup(ctx, LeaveRequest{TenantID: "t1", Group: "g", MemberID: hb.MemberID}))
	require.NoError(t, s.svc.DeleteGroup(ctx, "t1", "g"))
	require.ErrorIs(t, s.svc.DeleteGroup(ctx, "t1", "g"), derr.GroupIDNotFound)
}

// TestServiceListGroupsAsksEveryCoordinator: the list merges this
// broker's groups with every other coordinator's, without the duplicates
// of a leadership move; a failing coordinator, or an offsets partition
// without a leader, makes it Unavailable; Local answers for this broker
// only.
func TestServiceListGroupsAsksEveryCoordinator(t *testing.T) {
	t.Parallel()
	s := newSetup(t, false, self, 2)
	ctx := t.Context()
	// A group of this broker's offsets partition (0).
	var mine string
	for i := 0; ; i++ {
		if mine = fmt.Sprintf("g%d", i); coordinator.PartitionOf("t1", mine, 2) == 0 {
			break
		}
	}
	s.leaders.offsets[cluster.PartKey{TopicID: "orders-id", Partition: 0}] = Offsets{HighWatermark: 10}
	require.NoError(t, s.svc.CommitOffsets(ctx, CommitRequest{TenantID: "t1", Group: mine, Offsets: []PartitionOffset{{Topic: "orders", Offset: 1}}}))
	s.peers.groups = map[int32][]GroupSummary{2: {{Group: "a", State: "stable", Members: 2}, {Group: mine, State: "empty"}}}

	all, err := s.svc.ListGroups(ctx, ListGroupsRequest{TenantID: "t1"})
	require.NoError(t, err)
	require.Equal(t, []GroupSummary{{Group: "a", State: "stable", Members: 2}, {Group: mine, State: "empty"}}, all)
	local, err := s.svc.ListGroups(ctx, ListGroupsRequest{TenantID: "t1", Local: true})
	require.NoError(t, err)
	require.Equal(t, []GroupSummary{{Group: mine, State: "empty"}}, local)

	s.peers.err = map[int32]error{2: errors.New("connection refused")}
	_, err = s.svc.ListGroups(ctx, ListGroupsRequest{TenantID: "t1"})
	require.ErrorIs(t, err, derr.Unavailable)
	require.EqualError(t, err, "list groups: broker 2: connection refused")

	offline := newSetup(t, false, self, -1)
	_, err = offline.svc.ListGroups(ctx, ListGroupsRequest{TenantID: "t1"})
	require.ErrorIs(t, err, derr.LeaderNotAvailable)
}

// TestServiceTxnCommitOffsets: the request is checked, then the group is
// added to the producer's transaction (whose refusal is the answer), then
// the offsets are pending until the transaction's marker: FetchOffsets
// refuses them meanwhile (UnstableOffsetCommit).
func TestServiceTxnCommitOffsets(t *testing.T) {
	t.Parallel()
	s := newSetup(t, false, self)
	ctx := t.Context()
	s.leaders.offsets[cluster.PartKey{TopicID: "orders-id", Partition: 0}] = Offsets{HighWatermark: 10}
	var verified []string
	verifyErr := error(nil)
	s.svc.deps.VerifyTransactionGroup = func(_ context.Context, _ Credentials, tenantID, tid, g string, pid int64, epoch int16, _ bool) error {
		verified = append(verified, fmt.Sprintf("%s %s %s %d %d", tenantID, tid, g, pid, epoch))
		return verifyErr
	}
	req := TxnCommitRequest{CommitRequest: CommitRequest{TenantID: "t1", Group: "g", Offsets: []PartitionOffset{{Topic: "orders", Offset: 5}}}, TransactionalID: "job", ProducerID: 7, ProducerEpoch: 1}
	for _, bad := range []func(r *TxnCommitRequest){
		func(r *TxnCommitRequest) { r.TransactionalID = "" },
		func(r *TxnCommitRequest) { r.ProducerID = -1 },
		func(r *TxnCommitRequest) { r.ProducerEpoch = 1 << 15 },
		func(r *TxnCommitRequest) { r.Offsets = nil },
		func(r *TxnCommitRequest) { r.Unfenced, r.MemberID = true, "m1" }, // unfenced is from no member
	} {
		r := req
		bad(&r)
		require.ErrorIs(t, s.svc.TxnCommitOffsets(ctx, r), derr.InvalidRequest)
	}
	require.Empty(t, verified, "checked before the transaction coordinator is asked")
	verifyErr = derr.New(derr.ProducerFenced, "fenced")
	require.ErrorIs(t, s.svc.TxnCommitOffsets(ctx, req), derr.ProducerFenced)
	verifyErr = nil
	require.NoError(t, s.svc.TxnCommitOffsets(ctx, req))
	require.Equal(t, []string{"t1 job g 7 1", "t1 job g 7 1"}, verified)
	_, err := s.svc.FetchOffsets(ctx, FetchOffsetsRequest{TenantID: "t1", Group: "g"})
	require.ErrorIs(t, err, derr.UnstableOffsetCommit)

	c, _, err := s.svc.CoordinatorFor(ctx, "t1", "g")
	require.NoError(t, err)
	require.NoError(t, c.WriteTxnMarker(ctx, "t1", "g", 7, 2, 0, true, false))
	got, err := s.svc.FetchOffsets(ctx, FetchOffsetsRequest{TenantID: "t1", Group: "g"})
	require.NoError(t, err)
	require.Equal(t, []PartitionOffset{{Topic: "orders", Offset: 5}}, got)
}

// TestServiceLagReport: off, the report is refused (FailedPrecondition);
// on, Unavailable until the first round; a round reports every committed
// offset whose leader answered, with the broker's own credentials.
func TestServiceLagReport(t *testing.T) {
	t.Parallel()
	off := newSetup(t, false, self)
	_, err := off.svc.LagReport()
	require.ErrorIs(t, err, derr.FailedPrecondition)

	s := newSetup(t, true, self)
	ctx := t.Context()
	_, err = s.svc.LagReport()
	require.ErrorIs(t, err, derr.Unavailable)
	s.leaders.offsets[cluster.PartKey{TopicID: "orders-id", Partition: 0}] = Offsets{HighWatermark: 10, LastStableOffset: 10}
	s.leaders.offsets[cluster.PartKey{TopicID: "orders-id", Partition: 1}] = Offsets{HighWatermark: 4, LastStableOffset: 4}
	s.leaders.first[cluster.PartKey{TopicID: "orders-id", Partition: 0}] = s.now.Add(-2 * time.Second)
	require.NoError(t, s.svc.CommitOffsets(ctx, CommitRequest{TenantID: "t1", Group: "g", Offsets: []PartitionOffset{{Topic: "orders", Offset: 4}, {Topic: "orders", Partition: 1, Offset: 4}}}))
	delete(s.leaders.offsets, cluster.PartKey{TopicID: "orders-id", Partition: 1}) // its leader stops answering
	s.leaders.creds = nil

	s.svc.ComputeLag(ctx, s.now, 100)
	r, err := s.svc.LagReport()
	require.NoError(t, err)
	require.Equal(t, s.now, r.ComputeTime)
	require.Equal(t, []GroupPartitionLag{{TenantID: "t1", Group: "g", TopicID: "orders-id", Topic: "orders", CommittedOffset: 4, HighWatermark: 10, LagMessages: 6, LagSeconds: 2}}, r.Lags)
	for _, c := range s.leaders.creds {
		require.Equal(t, BrokerCredentials, c)
	}
}
