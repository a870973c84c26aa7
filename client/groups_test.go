package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// groupClient is a raw GroupService client on a broker (which forwards to
// the group's coordinator), authenticated with apiKey's token.
func groupClient(t *testing.T, key string) sluicev1connect.GroupServiceClient {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	tok, err := sluicev1connect.NewAuthServiceClient(hc, endpoint).CreateToken(t.Context(), connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: key}))
	require.NoError(t, err)
	auth := connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken()))
	md, err := sluicev1connect.NewRecordServiceClient(hc, endpoint, auth).GetMetadata(t.Context(), connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{}}))
	require.NoError(t, err)
	gc := sluicev1connect.NewGroupServiceClient(hc, "http://"+md.Msg.GetBrokers()[0].GetAddress(), auth)
	// The control plane creates the offsets topic once the brokers are live.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := gc.FindCoordinator(t.Context(), connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: "probe"}))
		if err == nil {
			return gc
		}
		require.True(t, time.Now().Before(deadline), "no coordinator: %v", err)
		time.Sleep(100 * time.Millisecond) // poll: until a coordinator answers
	}
}

func TestCommitAndFetchOffsets(t *testing.T) {
	committedName, billing := fresh("committed"), fresh("billing")
	createTopic(t, committedName, 2, nil)
	c := newClient(t)
	p, err := c.NewProducer(t.Context())
	require.NoError(t, err)
	recs := make([]*client.Record, 10)
	for i := range recs {
		recs[i] = &client.Record{Topic: committedName, Key: []byte{byte(i)}, Value: []byte("v")}
	}
	require.NoError(t, p.ProduceSync(t.Context(), recs...))
	require.NoError(t, p.Close(t.Context()))
	_, hw0, err := c.Watermarks(t.Context(), committedName, 0)
	require.NoError(t, err)

	gc := groupClient(t, apiKey)
	ctx := t.Context()
	commit := func(group string, offs ...*sluicev1.PartitionOffset) error {
		// A coordinator that just took over answers Unavailable until it
		// has loaded its partition: retry that, as the SDK does.
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, err := gc.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: group, Offsets: offs}))
			if connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) {
				return err
			}
			time.Sleep(50 * time.Millisecond) // backoff: the coordinator is loading
		}
	}
	require.NoError(t, commit(billing, &sluicev1.PartitionOffset{Topic: committedName, Partition: 0, Offset: hw0, LeaderEpoch: 0, Metadata: "m"}))
	require.NoError(t, commit(billing, &sluicev1.PartitionOffset{Topic: committedName, Partition: 1, Offset: 0}))
	require.NoError(t, commit(billing, &sluicev1.PartitionOffset{Topic: committedName, Partition: 0, Offset: 1}), "a commit may go backwards (a reset)")

	res, err := gc.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: billing}))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetOffsets(), 2)
	require.Equal(t, int64(1), res.Msg.GetOffsets()[0].GetOffset(), "the latest commit wins")
	require.Equal(t, int64(0), res.Msg.GetOffsets()[1].GetOffset())

	res, err = gc.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: billing,
		Partitions: []*sluicev1.TopicPartitions{{Topic: committedName, Partitions: []int32{0, 1}}}}))
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Msg.GetOffsets()[0].GetOffset())
	res, err = gc.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: "nobody",
		Partitions: []*sluicev1.TopicPartitions{{Topic: committedName, Partitions: []int32{0}}}}))
	require.NoError(t, err)
	require.Equal(t, int64(-1), res.Msg.GetOffsets()[0].GetOffset(), "no commit yet")

	// Bad input: nothing is written.
	err = commit(billing, &sluicev1.PartitionOffset{Topic: committedName, Partition: 0, Offset: hw0 + 1})
	require.Equal(t, connect.CodeOutOfRange, connect.CodeOf(err), "beyond the high watermark: %v", err)
	err = commit(billing, &sluicev1.PartitionOffset{Topic: "nope", Partition: 0, Offset: 0})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	err = commit(billing, &sluicev1.PartitionOffset{Topic: committedName, Partition: 7, Offset: 0})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	err = commit(billing, &sluicev1.PartitionOffset{Topic: committedName, Partition: 0, Offset: -3})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	err = commit("", &sluicev1.PartitionOffset{Topic: committedName, Partition: 0, Offset: 0})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	err = commit(billing)
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	res, err = gc.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: billing}))
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Msg.GetOffsets()[0].GetOffset(), "refused commits changed nothing")

	// Another tenant with the same group name sees none of it.
	createTenantTopic := func() string {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
		su, err := sluicev1connect.NewTenantServiceClient(hc, endpoint).Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: fresh("other") + "@example.com", TenantName: fresh("other-tenant")}))
		require.NoError(t, err)
		return su.Msg.GetApiKeySecret()
	}
	other := groupClient(t, createTenantTopic())
	res, err = other.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: billing}))
	require.NoError(t, err)
	require.Empty(t, res.Msg.GetOffsets(), "tenant isolation")
	_, err = other.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: billing,
		Offsets: []*sluicev1.PartitionOffset{{Topic: committedName, Partition: 0, Offset: 0}}}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "another tenant's topic does not exist for it: %v", err)
}

// TestGroupMembershipRaw drives GroupHeartbeat by hand: two members share
// a topic's partitions without overlap, commits are checked against
// ownership, and a leaving member's partitions go to the other.
func TestGroupMembershipRaw(t *testing.T) {
	sharedName, workers := fresh("shared"), fresh("workers")
	createTopic(t, sharedName, 4, nil)
	gc := groupClient(t, apiKey)
	ctx := t.Context()
	type member struct {
		id    string
		epoch int32
		owned []int32
	}
	beat := func(m *member) error {
		req := &sluicev1.GroupHeartbeatRequest{Group: workers, MemberId: m.id, MemberEpoch: m.epoch,
			OwnedSet: true, Owned: []*sluicev1.TopicPartitions{{Topic: sharedName, Partitions: m.owned}}}
		if m.id == "" {
			req.SubscriptionSet, req.SubscribedTopics = true, []string{sharedName}
		}
		res, err := gc.GroupHeartbeat(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		m.id, m.epoch = res.Msg.GetMemberId(), res.Msg.GetMemberEpoch()
		m.owned = nil
		for _, tp := range res.Msg.GetAssignment() {
			m.owned = append(m.owned, tp.GetPartitions()...)
		}
		return nil
	}
	a, b := &member{}, &member{}
	require.NoError(t, beat(a))
	require.NotEmpty(t, a.id)
	require.Len(t, a.owned, 4, "a lone member owns everything")
	require.NoError(t, beat(b))
	for range 5 { // a few rounds to settle: a revokes, then b receives
		require.NoError(t, beat(a))
		require.NoError(t, beat(b))
	}
	require.Len(t, a.owned, 2)
	require.Len(t, b.owned, 2)
	require.ElementsMatch(t, []int32{0, 1, 2, 3}, append(append([]int32{}, a.owned...), b.owned...), "disjoint and complete")

	commit := func(m *member, p int32) error {
		_, err := gc.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: workers, MemberId: m.id, MemberEpoch: m.epoch,
			Offsets: []*sluicev1.PartitionOffset{{Topic: sharedName, Partition: p, Offset: 0}}}))
		return err
	}
	require.NoError(t, commit(a, a.owned[0]))
	err := commit(a, b.owned[0])
	reason, _ := client.ErrorDetail[*sluicev1.GroupError](err)
	require.Equal(t, sluicev1.GroupError_REASON_NOT_OWNED, reason.GetReason(), "%v", err)
	_, err = gc.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: workers,
		Offsets: []*sluicev1.PartitionOffset{{Topic: sharedName, Partition: 0, Offset: 0}}}))
	reason, _ = client.ErrorDetail[*sluicev1.GroupError](err)
	require.Equal(t, sluicev1.GroupError_REASON_GROUP_ACTIVE, reason.GetReason(), "%v", err)
	_, err = gc.GroupHeartbeat(ctx, connect.NewRequest(&sluicev1.GroupHeartbeatRequest{Group: workers, MemberId: "nobody", MemberEpoch: 3}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	_, err = gc.GroupHeartbeat(ctx, connect.NewRequest(&sluicev1.GroupHeartbeatRequest{Group: workers, MemberId: a.id, MemberEpoch: a.epoch - 1}))
	reason, _ = client.ErrorDetail[*sluicev1.GroupError](err)
	require.Equal(t, sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH, reason.GetReason(), "%v", err)

	_, err = gc.LeaveGroup(ctx, connect.NewRequest(&sluicev1.LeaveGroupRequest{Group: workers, MemberId: a.id}))
	require.NoError(t, err)
	require.NoError(t, beat(b))
	require.Len(t, b.owned, 4, "the leaver's partitions go to the other member")
}

// TestGroupConsumer: two members share a topic; a third joins and one
// leaves mid-stream; every record is processed once (at-least-once with
// commits on revocation gives no replays without crashes), in order per
// partition.
func TestGroupConsumer(t *testing.T) {
	jobsName := fresh("jobs")
	processorsName := fresh("processors")
	createTopic(t, jobsName, 6, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	defer p.Close(ctx)
	const n = 3000
	produce := func(from, to int) {
		var recs []*client.Record
		for i := from; i < to; i++ {
			recs = append(recs, &client.Record{Topic: jobsName, Key: fmt.Appendf(nil, "k%d", i%50), Value: fmt.Appendf(nil, "%d", i)})
		}
		require.NoError(t, p.ProduceSync(ctx, recs...))
	}
	produce(0, n/3)

	var mu sync.Mutex
	seen := map[string]int{}
	last := map[int32]int64{}
	var order []string
	handler := func(name string) func(context.Context, *client.Record) error {
		return func(_ context.Context, r *client.Record) error {
			mu.Lock()
			defer mu.Unlock()
			seen[string(r.Value)]++
			if l, ok := last[r.Partition]; ok && r.Offset <= l {
				order = append(order, fmt.Sprintf("%s: partition %d offset %d after %d", name, r.Partition, r.Offset, l))
			}
			last[r.Partition] = r.Offset
			return nil
		}
	}
	start := func(name string) (*client.GroupConsumer, context.CancelFunc, chan error) {
		gc, err := c.NewGroupConsumer(ctx, processorsName, []string{jobsName}, client.WithCommitMode(client.CommitEvery(10)))
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- gc.Run(rctx, handler(name)) }()
		return gc, cancel, done
	}
	a, stopA, doneA := start("a")
	b, stopB, doneB := start("b")
	produce(n/3, 2*n/3)
	c3, stopC, doneC := start("c")
	// A leaves once the group has rebalanced onto all three members.
	testenv.Wait(t, 30*time.Second, "every member holding partitions", func() error {
		for name, gc := range map[string]*client.GroupConsumer{"a": a, "b": b, "c": c3} {
			if len(gc.Assignment()) == 0 {
				return fmt.Errorf("member %s holds none", name)
			}
		}
		return nil
	})
	stopA()
	require.NoError(t, <-doneA)
	require.NoError(t, a.Close(ctx))
	produce(2*n/3, n)

	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n {
			break
		}
		require.True(t, time.Now().Before(deadline), "processed %d of %d", got, n)
		time.Sleep(50 * time.Millisecond) // poll: until every record is processed
	}
	stopB()
	stopC()
	require.NoError(t, <-doneB)
	require.NoError(t, <-doneC)
	require.NoError(t, b.Close(ctx))
	require.NoError(t, c3.Close(ctx))
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, k := range seen {
		if k > 1 {
			dups++
		}
	}
	require.Zero(t, dups, "no record processed twice")
	require.Empty(t, order, "in order per partition")
}

func TestGroupAdmin(t *testing.T) {
	auditedName := fresh("audited")
	auditorsName := fresh("auditors")
	createTopic(t, auditedName, 2, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx, client.WithManualPartitioner())
	require.NoError(t, err)
	for i := range 20 {
		require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: auditedName, Partition: int32(i % 2), Value: []byte("x")}))
	}
	require.NoError(t, p.Close(ctx))
	gc := groupClient(t, apiKey)

	member, err := c.NewGroupConsumer(ctx, auditorsName, []string{auditedName}, client.WithCommitMode(client.CommitManual()))
	require.NoError(t, err)
	got := 0
	for got < 5 {
		recs, err := member.Poll(ctx)
		require.NoError(t, err)
		got += len(recs)
	}
	require.NoError(t, member.Commit(ctx))

	list, err := gc.ListGroups(ctx, connect.NewRequest(&sluicev1.ListGroupsRequest{}))
	require.NoError(t, err)
	var names []string
	for _, g := range list.Msg.GetGroups() {
		names = append(names, g.GetGroup())
	}
	require.Contains(t, names, auditorsName)

	d, err := gc.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: auditorsName}))
	require.NoError(t, err)
	require.Len(t, d.Msg.GetMembers(), 1)
	require.Len(t, d.Msg.GetPartitions(), 2)
	for _, pl := range d.Msg.GetPartitions() {
		require.Equal(t, int64(10), pl.GetHighWatermark())
		require.Equal(t, pl.GetHighWatermark()-max(pl.GetCommittedOffset(), 0), pl.GetLag())
		require.Equal(t, d.Msg.GetMembers()[0].GetMemberId(), pl.GetMemberId())
		if pl.GetLag() > 0 {
			require.Greater(t, pl.GetLagSeconds(), 0.0)
		}
	}

	_, err = gc.DeleteGroup(ctx, connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: auditorsName}))
	require.Equal(t, sluicev1.GroupError_REASON_GROUP_ACTIVE, client.ErrorDetailReason(err), "%v", err)
	_, err = gc.ResetOffsets(ctx, connect.NewRequest(&sluicev1.ResetOffsetsRequest{Group: auditorsName, Topic: auditedName, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}))
	require.Equal(t, sluicev1.GroupError_REASON_GROUP_ACTIVE, client.ErrorDetailReason(err), "%v", err)

	require.NoError(t, member.Close(ctx))
	reset, err := gc.ResetOffsets(ctx, connect.NewRequest(&sluicev1.ResetOffsetsRequest{Group: auditorsName, Topic: auditedName, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED, Offset: 1 << 40}))
	require.NoError(t, err)
	for _, o := range reset.Msg.GetOffsets() {
		require.Equal(t, int64(10), o.GetOffset(), "clamped to the high watermark")
	}
	d, err = gc.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: auditorsName}))
	require.NoError(t, err)
	for _, pl := range d.Msg.GetPartitions() {
		require.Zero(t, pl.GetLag())
	}
	_, err = gc.ResetOffsets(ctx, connect.NewRequest(&sluicev1.ResetOffsetsRequest{Group: auditorsName, Topic: "nope", Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))

	_, err = gc.DeleteGroup(ctx, connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: auditorsName}))
	require.NoError(t, err)
	_, err = gc.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: auditorsName}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	_, err = gc.DeleteGroup(ctx, connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: auditorsName}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
}

// TestGroupRunFailureSkipsNothing: a Run whose handler fails returns the
// error; the next Run starts with the record that failed (at-least-once)
// and then the rest of that fetch, so nothing is skipped or reordered. With
// at-most-once the failed record is not handed out again, the rest is.
func TestGroupRunFailureSkipsNothing(t *testing.T) {
	flakyName := fresh("flaky")
	createTopic(t, flakyName, 1, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	defer p.Close(ctx)
	var recs []*client.Record
	for i := range 100 {
		recs = append(recs, &client.Record{Topic: flakyName, Value: fmt.Appendf(nil, "%d", i)})
	}
	require.NoError(t, p.ProduceSync(ctx, recs...)) // one fetch holds them all

	for _, tc := range []struct {
		name     string
		delivery client.Delivery
		want     []int64 // offsets handed to the handler, in order
	}{
		{"at-least-once", client.AtLeastOnce, append(seq(0, 11), seq(10, 100)...)},
		{"at-most-once", client.AtMostOnce, append(seq(0, 11), seq(11, 100)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gc, err := c.NewGroupConsumer(ctx, flakyName+"-"+tc.name, []string{flakyName},
				client.WithDelivery(tc.delivery), client.WithCommitMode(client.CommitEvery(3)))
			require.NoError(t, err)
			defer gc.Close(context.Background())
			var got []int64
			boom := errors.New("boom")
			err = gc.Run(ctx, func(_ context.Context, r *client.Record) error {
				got = append(got, r.Offset)
				if r.Offset == 10 {
					return boom
				}
				return nil
			})
			require.ErrorIs(t, err, boom)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a skipped record never comes
			defer cancel()
			err = gc.Run(rctx, func(_ context.Context, r *client.Record) error {
				got = append(got, r.Offset)
				if r.Offset == 99 {
					cancel()
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}
