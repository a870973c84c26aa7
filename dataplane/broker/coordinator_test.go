package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicemq/sluice/controlplane/store"
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
