package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"connectrpc.com/connect"

	sluice "github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestConsumerGroupKIP848: franz-go's consumers in one group with
// KIP-848's protocol (kgo.ServerSideBalancer) settle with two of a
// topic's four partitions each and read every record once, committing as
// they go; kadm sees the group (list, describe, its offsets); a consumer
// that joins after both left resumes from the committed offsets; the
// empty group is deleted with its offsets.
func TestConsumerGroupKIP848(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t))
	topic := fmt.Sprintf("groups-848-%d", time.Now().UnixNano())
	groupID := topic + "-g"
	createTopic(t, adm, topic, 4)
	produce := func(from, n int) {
		t.Helper()
		prod := client(t, kgo.DefaultProduceTopic(topic))
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	var mu sync.Mutex
	seen := map[string]int{}
	members := map[int]map[int32]bool{} // member → partitions it read
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	consume := func(member int, cl *kgo.Client, until func() bool) {
		t.Helper()
		for !until() {
			// poll: a member may have nothing left to read while the
			// other reads the rest.
			pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			if ctx.Err() != nil {
				t.Errorf("member %d: %v (read %d distinct records)", member, ctx.Err(), count())
				return
			}
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("member %d: %s/%d: %v", member, topic, p, err)
				}
			})
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				seen[string(r.Value)]++
				if members[member] == nil {
					members[member] = map[int32]bool{}
				}
				members[member][r.Partition] = true
			})
			mu.Unlock()
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Errorf("member %d: commit: %v", member, err)
			}
		}
	}
	member := func() *kgo.Client {
		return client(t, kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	}
	a, b := member(), member()
	// The group settles before anything is written, so that each member
	// reads its own two partitions.
	testenv.Wait(t, 30*time.Second, "two members each holding two partitions", func() error {
		_, err := stableTwoByTwo(ctx, a, groupID, topic)
		return err
	})
	produce(0, 400)
	var wg sync.WaitGroup
	for i, cl := range []*kgo.Client{a, b} {
		wg.Go(func() { consume(i, cl, func() bool { return count() >= 400 }) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	mu.Lock()
	for v, n := range seen {
		if n != 1 {
			t.Errorf("record %s read %d times by a stable group", v, n)
		}
	}
	for m, parts := range members {
		if len(parts) != 2 {
			t.Errorf("member %d read partitions %v, want two", m, parts)
		}
	}
	mu.Unlock()

	// kadm: the group, its members and its committed offsets.
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lg, ok := listed[groupID]; !ok || lg.ProtocolType != "consumer" {
		t.Errorf("ListGroups: %v, want %s with protocol type consumer", listed, groupID)
	}
	offsets, err := adm.FetchOffsets(ctx, groupID)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			t.Errorf("offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		total += o.At
	})
	if total != 400 {
		t.Errorf("committed offsets sum to %d, want 400", total)
	}

	// Both leave; a new member resumes from the commits and reads only
	// what came after.
	a.Close()
	b.Close()
	produce(400, 100)
	c := member()
	mu.Lock()
	seen = map[string]int{}
	mu.Unlock()
	consume(2, c, func() bool { return count() >= 100 })
	mu.Lock()
	for v := range seen {
		var i int
		if _, err := fmt.Sscanf(v, "v%d", &i); err != nil || i < 400 {
			t.Errorf("the resumed member read %s, committed before", v)
		}
	}
	mu.Unlock()
	c.Close()

	// Deleting needs the group empty: once c's leave is through, it is
	// gone with its offsets.
	testenv.Wait(t, 30*time.Second, "group deleted", func() error {
		res, err := adm.DeleteGroups(ctx, groupID)
		if err != nil {
			return err
		}
		return res[groupID].Err
	})
	offsets, err = adm.FetchOffsets(ctx, groupID)
	if err != nil {
		t.Fatal(err)
	}
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.At >= 0 {
			t.Errorf("after the delete, %s/%d has offset %d", o.Topic, o.Partition, o.At)
		}
	})
}

// TestGroupRequestsRefused: group requests a tenant may not make, or
// with what Sluice does not serve, are answered with Kafka's codes.
func TestGroupRequestsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := client(t)
	topic := fmt.Sprintf("groups-refused-%d", time.Now().UnixNano())
	createTopic(t, kadm.NewClient(cl), topic, 1)

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKeys = 3, []string{"some-key"}
	fres, err := fc.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := fres.Coordinators[0].ErrorCode; code != kerr.InvalidRequest.Code {
		t.Errorf("FindCoordinator of an unknown type: %v, want INVALID_REQUEST", kerr.ErrorForCode(code))
	}

	// The rest goes to the group's coordinator.
	group := topic + "-g"
	fc = kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{group}
	if fres, err = fc.RequestWith(ctx, cl); err != nil || fres.Coordinators[0].ErrorCode != 0 {
		t.Fatalf("FindCoordinator: %v %v", err, fres)
	}
	coord := cl.Broker(int(fres.Coordinators[0].NodeID))

	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.SubscribedTopicNames, hb.Topics = group, "m-1", []string{topic}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	regex := "groups-.*"
	hb.SubscribedTopicRegex = &regex
	hres, err := hb.RequestWith(ctx, coord)
	if err != nil {
		t.Fatal(err)
	}
	if hres.ErrorCode != kerr.InvalidRequest.Code || hres.ErrorMessage == nil {
		t.Errorf("heartbeat with a regex: %v %v, want INVALID_REQUEST with a message", kerr.ErrorForCode(hres.ErrorCode), hres.ErrorMessage)
	}

	// A heartbeat of a member the group does not know (epoch 1) is
	// UNKNOWN_MEMBER_ID; a join under the client's id then works.
	hb.SubscribedTopicRegex, hb.MemberEpoch = nil, 1
	if hres, err = hb.RequestWith(ctx, coord); err != nil || hres.ErrorCode != kerr.UnknownMemberID.Code {
		t.Errorf("heartbeat of an unknown member: %v %v, want UNKNOWN_MEMBER_ID", err, kerr.ErrorForCode(hres.ErrorCode))
	}
	hb.MemberEpoch = 0
	if hres, err = hb.RequestWith(ctx, coord); err != nil || hres.ErrorCode != 0 || hres.MemberID == nil || *hres.MemberID != "m-1" || hres.MemberEpoch < 1 {
		t.Fatalf("join as m-1: %v %+v", err, hres)
	}

	// A commit at an epoch the member is not at is STALE_MEMBER_EPOCH
	// (v9); of a topic that does not exist, UNKNOWN_TOPIC_OR_PARTITION.
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.MemberID, oc.Generation = group, "m-1", hres.MemberEpoch+5
	for _, name := range []string{topic, "no-such-topic"} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = name
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		oc.Topics = append(oc.Topics, rt)
	}
	ores, err := oc.RequestWith(ctx, coord)
	if err != nil {
		t.Fatal(err)
	}
	if code := ores.Topics[0].Partitions[0].ErrorCode; code != kerr.StaleMemberEpoch.Code {
		t.Errorf("commit at a wrong epoch: %v, want STALE_MEMBER_EPOCH", kerr.ErrorForCode(code))
	}
	if code := ores.Topics[1].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("commit of a missing topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code))
	}

	// A commit from outside a group beyond the partition's end is
	// INVALID_COMMIT_OFFSET_SIZE (Kafka has no out-of-range refusal for
	// commits).
	far := kmsg.NewPtrOffsetCommitRequest()
	far.Group, far.Generation = group+"-outside", -1
	ft := kmsg.NewOffsetCommitRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewOffsetCommitRequestTopicPartition()
	fp.Offset = 1000
	ft.Partitions = append(ft.Partitions, fp)
	far.Topics = append(far.Topics, ft)
	farRes, ferr := far.RequestWith(ctx, cl)
	if ferr != nil {
		t.Fatal(ferr)
	}
	if code := farRes.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidCommitOffsetSize.Code {
		t.Errorf("commit beyond the end: %v, want INVALID_COMMIT_OFFSET_SIZE", kerr.ErrorForCode(code))
	}

	// A group with a member cannot be deleted.
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = []string{group}
	dres, err := dg.RequestWith(ctx, coord)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(dres.Groups[0].ErrorCode); !errors.Is(err, kerr.NonEmptyGroup) {
		t.Errorf("delete of a group with a member: %v, want NON_EMPTY_GROUP", err)
	}
}

// TestConsumerGroupKafkaAndSDKMembers: a franz-go member (KIP-848) and
// a Sluice SDK member of one group share its partitions: one coordinator
// behind both doors, two partitions each once the group is stable.
func TestConsumerGroupKafkaAndSDKMembers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t))
	topic := fmt.Sprintf("groups-mixed-%d", time.Now().UnixNano())
	groupID := topic + "-g"
	createTopic(t, adm, topic, 4)

	sdk, err := sluice.New(ctx, cluster.Endpoint, sluice.APIKey(tenant.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sdk.Close() })
	gc, err := sdk.NewGroupConsumer(ctx, groupID, []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gc.Close(context.Background()) })
	// The SDK member takes partitions as it polls.
	go func() {
		for ctx.Err() == nil {
			if _, err := gc.Poll(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("SDK member: %v", err)
				return
			}
		}
	}()
	kmember := client(t, kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer())
	go func() {
		for ctx.Err() == nil {
			kmember.PollFetches(ctx)
		}
	}()
	testenv.Wait(t, time.Minute, "the SDK member and the Kafka member with two partitions each", func() error {
		members, err := stableTwoByTwo(ctx, kmember, groupID, topic)
		if err != nil {
			return err
		}
		if sdkID := gc.Member().MemberID; !slices.Contains(members, sdkID) {
			return fmt.Errorf("SDK member %s not among the members %v", sdkID, members)
		}
		return nil
	})
	cancel()
}

// TestConsumerGroupClassic: franz-go's consumers with the classic
// protocol (JoinGroup and SyncGroup, the cooperative-sticky assignor
// computed by the leader client) settle with two partitions each
// (DescribeGroups), read every record once and commit; when one leaves
// the other takes its partitions over from the commits; a new member
// joins and the group settles again with both.
func TestConsumerGroupClassic(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t))
	topic := fmt.Sprintf("groups-classic-%d", time.Now().UnixNano())
	groupID := topic + "-g"
	createTopic(t, adm, topic, 4)
	prod := client(t, kgo.DefaultProduceTopic(topic))
	produce := func(from, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	// poll reads what cl has until until() holds.
	poll := func(cl *kgo.Client, until func() bool) {
		for !until() && ctx.Err() == nil {
			// poll: the member may have nothing to read while others do.
			pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Errorf("%s/%d: %v", topic, p, err)
				}
			})
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
			mu.Unlock()
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				t.Logf("commit: %v (a rebalance moved the partitions; retried with the next poll)", err)
			}
		}
	}
	settled := func(members int) {
		t.Helper()
		testenv.Wait(t, time.Minute, fmt.Sprintf("a stable group of %d members with partitions", members), func() error {
			described, err := adm.DescribeGroups(ctx, groupID)
			if err != nil {
				return err
			}
			g := described[groupID]
			if g.Err != nil {
				return g.Err
			}
			if g.State != "Stable" || len(g.Members) != members || g.Protocol != "cooperative-sticky" {
				return fmt.Errorf("state %s protocol %s with %d members", g.State, g.Protocol, len(g.Members))
			}
			total := 0
			for _, m := range g.Members {
				ca, ok := m.Assigned.AsConsumer()
				if !ok || len(ca.Topics) != 1 || len(ca.Topics[0].Partitions) != 4/members {
					return fmt.Errorf("member %s assigned %v", m.MemberID, m.Assigned)
				}
				total += len(ca.Topics[0].Partitions)
			}
			if total != 4 {
				return fmt.Errorf("%d partitions assigned, want 4", total)
			}
			return nil
		})
	}
	member := func() *kgo.Client {
		return client(t, kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	}
	// Members join (and sync, heartbeat) as they poll.
	a, b := member(), member()
	pollCtx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, cl := range []*kgo.Client{a, b} {
		wg.Go(func() { poll(cl, func() bool { return pollCtx.Err() != nil }) })
	}
	settled(2)
	// The Connect API (sluice group describe) describes the classic
	// group's members and which partition each holds.
	sdk, err := sluice.New(ctx, cluster.Endpoint, sluice.APIKey(tenant.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ga, err := sdk.GroupAdmin()
	if err != nil {
		t.Fatal(err)
	}
	desc, err := ga.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: groupID}))
	if err != nil {
		t.Fatal(err)
	}
	if st := desc.Msg.GetState(); st != "stable" || len(desc.Msg.GetMembers()) != 2 {
		t.Errorf("DescribeGroup: state %q with %d members, want stable with 2", st, len(desc.Msg.GetMembers()))
	}
	for _, m := range desc.Msg.GetMembers() {
		if got := m.GetSubscribedTopics(); len(got) != 1 || got[0] != topic || len(m.GetAssignment()) != 1 || len(m.GetAssignment()[0].GetPartitions()) != 2 {
			t.Errorf("DescribeGroup: member %s subscribed to %v, assigned %v", m.GetMemberId(), got, m.GetAssignment())
		}
	}
	for _, pl := range desc.Msg.GetPartitions() {
		if pl.GetMemberId() == "" {
			t.Errorf("DescribeGroup: partition %d held by nobody", pl.GetPartition())
		}
	}
	produce(0, 400)
	testenv.Wait(t, time.Minute, "400 records read", func() error {
		if n := count(); n < 400 {
			return fmt.Errorf("%d read", n)
		}
		return nil
	})
	stopPolling()
	wg.Wait()
	mu.Lock()
	for v, n := range seen {
		if n != 1 {
			t.Errorf("record %s read %d times by a stable group", v, n)
		}
	}
	mu.Unlock()

	// b leaves; a takes all four partitions over from the commits and
	// reads only what comes after.
	b.Close()
	mu.Lock()
	seen = map[string]int{}
	mu.Unlock()
	pollCtx, stopPolling = context.WithCancel(ctx)
	wg.Go(func() { poll(a, func() bool { return pollCtx.Err() != nil }) })
	settled(1)
	produce(400, 100)
	testenv.Wait(t, time.Minute, "100 more records read", func() error {
		if n := count(); n < 100 {
			return fmt.Errorf("%d read", n)
		}
		return nil
	})
	mu.Lock()
	for v := range seen {
		var i int
		if _, err := fmt.Sscanf(v, "v%d", &i); err != nil || i < 400 {
			t.Errorf("read %s again after b left, committed before", v)
		}
	}
	mu.Unlock()

	// A new member: the group settles with two again.
	c := member()
	wg.Go(func() { poll(c, func() bool { return pollCtx.Err() != nil }) })
	settled(2)
	stopPolling()
	wg.Wait()
}

// stableTwoByTwo checks, with ConsumerGroupDescribe through cl, that the
// group is stable with two members holding two partitions of topic
// each, and returns their member ids.
func stableTwoByTwo(ctx context.Context, cl *kgo.Client, groupID, topic string) ([]string, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{groupID}
	res, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	g := res.Groups[0]
	if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
		return nil, err
	}
	if g.State != "Stable" || len(g.Members) != 2 {
		return nil, fmt.Errorf("state %s with %d members", g.State, len(g.Members))
	}
	var ids []string
	for _, m := range g.Members {
		if tps := m.Assignment.TopicPartitions; len(tps) != 1 || len(tps[0].Partitions) != 2 || tps[0].Topic != topic {
			return nil, fmt.Errorf("member %s assigned %v", m.MemberID, tps)
		}
		ids = append(ids, m.MemberID)
	}
	return ids, nil
}

// TestClassicDeadMemberLeavesTheJoinPhase: a classic member that stops
// (killed: no leave, no heartbeat) while a new member joins is removed at
// its session timeout, and the join phase ends then with the members that
// rejoined, not at the rebalance timeout (which a client's JoinGroup read
// timeout may not outlast: sarama's 30 s against its 60 s).
func TestClassicDeadMemberLeavesTheJoinPhase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl := client(t)
	topic := fmt.Sprintf("groups-dead-%d", time.Now().UnixNano())
	createTopic(t, kadm.NewClient(cl), topic, 2)
	groupID := topic + "-g"
	coord := func() *kgo.Broker {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKey = groupID
		res, err := fc.RequestWith(ctx, cl)
		if err != nil || res.ErrorCode != 0 {
			t.Fatalf("find coordinator: %v %v", err, res)
		}
		return cl.Broker(int(res.NodeID))
	}()
	// join joins as a new member and returns its answer once the join
	// phase ends.
	join := func(name string) *kmsg.JoinGroupResponse {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis, req.ProtocolType = groupID, 6000, 60000, "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte(name)
		req.Protocols = append(req.Protocols, p)
		res, err := req.RequestWith(ctx, coord)
		if err != nil {
			t.Fatalf("%s join: %v", name, err)
		}
		if res.ErrorCode == kerr.MemberIDRequired.Code {
			req.MemberID = res.MemberID
			if res, err = req.RequestWith(ctx, coord); err != nil {
				t.Fatalf("%s join: %v", name, err)
			}
		}
		if res.ErrorCode != 0 {
			t.Fatalf("%s join: %v", name, kerr.ErrorForCode(res.ErrorCode))
		}
		return res
	}
	sync := func(res *kmsg.JoinGroupResponse) {
		req := kmsg.NewPtrSyncGroupRequest()
		req.Group, req.MemberID, req.Generation = groupID, res.MemberID, res.Generation
		for _, m := range res.Members {
			a := kmsg.NewSyncGroupRequestGroupAssignment()
			a.MemberID = m.MemberID
			req.GroupAssignment = append(req.GroupAssignment, a)
		}
		sres, err := req.RequestWith(ctx, coord)
		if err != nil || sres.ErrorCode != 0 {
			t.Fatalf("sync: %v %v", err, sres)
		}
	}
	a := join("a")
	sync(a) // a leads a stable group, then stops
	start := time.Now()
	b := join("b")
	took := time.Since(start)
	if len(b.Members) != 1 || b.Members[0].MemberID != b.MemberID || b.Generation != a.Generation+1 {
		t.Fatalf("b's join: generation %d, members %v; want generation %d with b alone", b.Generation, b.Members, a.Generation+1)
	}
	// a's session (6 s) ends the phase, checked every heartbeat interval;
	// the rebalance timeout (60 s) would be far later.
	if took > 30*time.Second {
		t.Fatalf("b's join took %v: the join phase waited for the rebalance timeout, not a's session", took)
	}
}
