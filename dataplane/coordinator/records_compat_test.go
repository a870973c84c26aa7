package coordinator

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
)

// TestCoordinatorRecordsCompatibleWithV1: the offsets topic's records
// moved from the public sluice.v1 package to sluice.coordinator.v1 with
// the same field numbers and types, so records on disk written by the
// first version decode unchanged. The hex strings are what
// sluice.v1.GroupRecordKey/GroupRecordValue (the first version's messages,
// GroupRecordValue.offset a sluice.v1.PartitionOffset) encoded, every field
// set; each decodes to the same values and encodes back to the same bytes.
func TestCoordinatorRecordsCompatibleWithV1(t *testing.T) {
	t.Parallel()
	offsetKey := &coordinatorv1.OffsetKey{TopicId: "0b6f7a4e-topic", Topic: "orders", Partition: 7}
	for _, c := range []struct {
		name, v1 string
		msg      proto.Message
	}{
		{"offset key", "0a0874656e616e742d61120762696c6c696e671a1a0a0e30623666376134652d746f70696312066f72646572731807",
			&coordinatorv1.GroupRecordKey{TenantId: "tenant-a", Group: "billing", Kind: &coordinatorv1.GroupRecordKey_Offset{Offset: offsetKey}}},
		{"group deleted key", "0a0874656e616e742d61120762696c6c696e672001",
			&coordinatorv1.GroupRecordKey{TenantId: "tenant-a", Group: "billing", Kind: &coordinatorv1.GroupRecordKey_GroupDeleted{GroupDeleted: true}}},
		{"static member key", "0a0874656e616e742d61120762696c6c696e672a080a06686f73742d31",
			&coordinatorv1.GroupRecordKey{TenantId: "tenant-a", Group: "billing", Kind: &coordinatorv1.GroupRecordKey_StaticMember{StaticMember: &coordinatorv1.StaticMemberKey{InstanceId: "host-1"}}}},
		{"txn offset key", "0a0874656e616e742d61120762696c6c696e67321f08e907121a0a0e30623666376134652d746f70696312066f72646572731807",
			&coordinatorv1.GroupRecordKey{TenantId: "tenant-a", Group: "billing", Kind: &coordinatorv1.GroupRecordKey_TxnOffset{TxnOffset: &coordinatorv1.TxnOffsetKey{ProducerId: 1001, Offset: offsetKey}}}},
		{"txn marker key", "0a0874656e616e742d61120762696c6c696e673a0308e907",
			&coordinatorv1.GroupRecordKey{TenantId: "tenant-a", Group: "billing", Kind: &coordinatorv1.GroupRecordKey_TxnMarker{TxnMarker: &coordinatorv1.TxnMarkerKey{ProducerId: 1001}}}},
		{"value", "0a140a066f7264657273100718959aef3a20042a016d10fba0f1c2b1341a086d656d6265722d31200328093001",
			&coordinatorv1.GroupRecordValue{Offset: &coordinatorv1.CommittedOffset{Topic: "orders", Partition: 7, Offset: 123456789, LeaderEpoch: 4, Metadata: "m"},
				CommitTimeMs: 1800000000123, MemberId: "member-1", ProducerEpoch: 3, CoordinatorEpoch: 9, Commit: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			old, err := hex.DecodeString(c.v1)
			require.NoError(t, err)
			got := c.msg.ProtoReflect().New().Interface()
			require.NoError(t, proto.Unmarshal(old, got))
			require.Empty(t, got.ProtoReflect().GetUnknown(), "every field known")
			require.True(t, proto.Equal(c.msg, got), "decoded %v, want %v", got, c.msg)
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.msg)
			require.NoError(t, err)
			require.Equal(t, c.v1, hex.EncodeToString(b))
		})
	}
}
