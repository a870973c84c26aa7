package api

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// Every procedure of every service the control plane mounts has a rule,
// except those of the brokers' services, which point at the brokers; of
// those only GetMetadata is served here. Nothing falls through to
// "unknown procedure".
func TestEveryMountedProcedureHasARuleOrPointsAtTheBrokers(t *testing.T) {
	t.Parallel()
	mounted := append(ServiceNames(), sluicev1connect.GroupServiceName)
	served := 0
	for _, name := range mounted {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		require.NoError(t, err, name)
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			proc := "/" + name + "/" + string(methods.Get(i).Name())
			_, hasRule := rules[proc]
			redirect := servedByBrokers(proc)
			_, brokerService := brokerServices[name]
			switch {
			case proc == sluicev1connect.RecordServiceGetMetadataProcedure:
				require.True(t, hasRule, proc)
				served++
			case brokerService:
				require.False(t, hasRule, "%s is served by brokers only", proc)
				require.NotNil(t, redirect, proc)
				require.Equal(t, connect.CodeUnimplemented, redirect.Code(), proc)
			default:
				require.True(t, hasRule, "no rule for %s", proc)
				require.Nil(t, redirect, proc)
			}
		}
	}
	require.Equal(t, 1, served)
	for _, proc := range []string{"/sluice.v1.RecordService/Bogus", "/sluice.v1.NoSuch/Produce", "sluice.v1.RecordService/Produce/x", "", "/"} {
		require.Nil(t, servedByBrokers(proc), proc)
	}
}
