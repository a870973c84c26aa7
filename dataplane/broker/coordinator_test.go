package broker

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/dataplane/group"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func TestOffsetsTopicNamesMatchTheControlPlane(t *testing.T) {
	require.Equal(t, store.SystemTenantID, systemTenantID)
	require.Equal(t, store.OffsetsTopic, offsetsTopic)
}

func TestGroupPartitionSpreadsAndSeparatesTenants(t *testing.T) {
	counts := make([]int, 16)
	for i := range 1600 {
		counts[groupPartition("tenant-a", "group-"+string(rune('a'+i%26))+string(rune('a'+i/26)), 16)]++
	}
	for p, n := range counts {
		require.Positive(t, n, "partition %d gets groups", p)
	}
	require.Equal(t, groupPartition("t", "g", 16), groupPartition("t", "g", 16), "stable")
	require.NotEqual(t, groupPartition("ab", "c", 1<<30), groupPartition("a", "bc", 1<<30), "tenant and group are separated")
}

// Every procedure a broker serves has an authorization rule: one without
// is refused as unknown.
func TestEveryServedProcedureHasARule(t *testing.T) {
	for _, fd := range []protoreflect.FileDescriptor{sluicev1.File_sluice_v1_record_proto, sluicev1.File_sluice_v1_replica_proto, sluicev1.File_sluice_v1_group_proto} {
		svcs := fd.Services()
		for i := range svcs.Len() {
			svc := svcs.Get(i)
			methods := svc.Methods()
			for j := range methods.Len() {
				proc := "/" + string(svc.FullName()) + "/" + string(methods.Get(j).Name())
				_, ok := rules[proc]
				require.True(t, ok, "no rule for %s", proc)
			}
		}
	}
}

// A coordinator that takes over a group rebuilds, from the offsets
// partition's records, the member id of each static member's latest
// incarnation: a process another one replaced before the failover is
// still fenced (heartbeat and commit), the current one is only unknown
// (it rejoins), and so is anything without the instance id. Records apply
// in log order, per (tenant, group, instance id).
func TestCoordinatorStaticIncarnationsSurviveReload(t *testing.T) {
	t.Parallel()
	groups := map[groupKey]*groupState{}
	static := func(tenant, grp, instance, member string) (*sluicev1.GroupRecordKey, *sluicev1.GroupRecordValue) {
		return &sluicev1.GroupRecordKey{TenantId: tenant, Group: grp, Kind: &sluicev1.GroupRecordKey_StaticMember{
			StaticMember: &sluicev1.StaticMemberKey{InstanceId: instance},
		}}, &sluicev1.GroupRecordValue{MemberId: member}
	}
	for i, r := range [][4]string{
		{"tenant-a", "g", "pod-x", "m1"},
		{"tenant-a", "g", "pod-x", "m2"}, // m2 replaced m1
		{"tenant-b", "g", "pod-x", "other"},
	} {
		k, v := static(r[0], r[1], r[2], r[3])
		applyGroupRecord(groups, int64(i), k, v)
	}
	require.Equal(t, map[string]string{"pod-x": "m2"}, groups[groupKey{"tenant-a", "g"}].instances)
	require.Equal(t, map[string]string{"pod-x": "other"}, groups[groupKey{"tenant-b", "g"}].instances, "tenants apart")

	c := &coordinator{b: &Broker{cfg: Config{GroupSessionTimeout: 10 * time.Second, GroupHeartbeatInterval: time.Second}}, groups: groups}
	offs := []*sluicev1.PartitionOffset{{Topic: "t", Partition: 0, Offset: 1}}
	reason := func(err error) sluicev1.GroupError_Reason {
		t.Helper()
		var ce *connect.Error
		require.ErrorAs(t, err, &ce)
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if ge, ok := v.(*sluicev1.GroupError); ok {
					return ge.GetReason()
				}
			}
		}
		return 0
	}
	// Before any heartbeat reaches the new coordinator.
	err := c.checkCommitter("tenant-a", "g", "m1", "pod-x", 3, offs)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Equal(t, sluicev1.GroupError_REASON_FENCED_INSTANCE_ID, reason(err))
	err = c.checkCommitter("tenant-a", "g", "m2", "pod-x", 3, offs)
	require.Equal(t, sluicev1.GroupError_REASON_UNKNOWN_MEMBER, reason(err), "the current incarnation rejoins")
	err = c.checkCommitter("tenant-a", "g", "m1", "", 3, offs)
	require.Equal(t, sluicev1.GroupError_REASON_UNKNOWN_MEMBER, reason(err))

	// Once the group is rebuilt here.
	c.mu.Lock()
	g, err := c.membersLocked("tenant-a", "g", "")
	c.mu.Unlock()
	require.NoError(t, err)
	now := time.Now()
	_, err = g.Heartbeat(now, group.HeartbeatRequest{MemberID: "m1", InstanceID: "pod-x", MemberEpoch: 3}, group.TopicMap(map[string]int32{"t": 1}))
	require.ErrorIs(t, err, group.ErrFencedInstanceID)
	require.Equal(t, sluicev1.GroupError_REASON_FENCED_INSTANCE_ID, reason(groupError(err, 0)))
	_, err = g.Heartbeat(now, group.HeartbeatRequest{MemberID: "m2", InstanceID: "pod-x", MemberEpoch: 3}, group.TopicMap(map[string]int32{"t": 1}))
	require.ErrorIs(t, err, group.ErrUnknownMember)
	err = c.checkCommitter("tenant-a", "g", "m1", "pod-x", 3, offs)
	require.Equal(t, sluicev1.GroupError_REASON_FENCED_INSTANCE_ID, reason(err))

	// The current process rejoins (a new member id), reporting what it
	// owns; the old one is still fenced, and cannot take the slot back
	// with its member id.
	res, err := g.Heartbeat(now, group.HeartbeatRequest{InstanceID: "pod-x", Subscriptions: []string{"t"}, Owned: group.TopicPartitions{"t": {0}}}, group.TopicMap(map[string]int32{"t": 1}))
	require.NoError(t, err)
	require.NotEqual(t, "m2", res.MemberID)
	_, err = g.Heartbeat(now, group.HeartbeatRequest{MemberID: "m1", InstanceID: "pod-x", Subscriptions: []string{"t"}}, group.TopicMap(map[string]int32{"t": 1}))
	require.ErrorIs(t, err, group.ErrFencedInstanceID)
	require.NoError(t, c.checkCommitter("tenant-a", "g", res.MemberID, "pod-x", res.MemberEpoch, offs))
	require.True(t, c.active(now, "tenant-a", "g"))
}
