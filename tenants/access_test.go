package tenants

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// Every RPC of every service of sluice.v1 declares its access rule, and
// every rule is well formed: a new RPC without one fails here (and the
// servers would refuse to start).
func TestAccessEveryRPCHasARule(t *testing.T) {
	t.Parallel()
	all, err := AllAccessRules()
	require.NoError(t, err)
	n := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("sluice.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				proc := "/" + string(svc.FullName()) + "/" + string(svc.Methods().Get(j).Name())
				r, ok := all[proc]
				require.True(t, ok, "no access rule for %s", proc)
				require.NotEmpty(t, r.ServedBy, proc)
				n++
			}
		}
		return true
	})
	require.Equal(t, n, len(all))
	require.Greater(t, n, 60, "the services of sluice.v1 are registered")

	cp, err := AccessRules(ServerControlPlane)
	require.NoError(t, err)
	br, err := AccessRules(ServerBroker)
	require.NoError(t, err)
	require.Equal(t, len(all)+1, len(cp)+len(br), "GetMetadata is the one procedure both serve")
	for proc, r := range all {
		_, inCP := cp[proc]
		_, inBr := br[proc]
		require.Equal(t, r.Serves(ServerControlPlane), inCP, proc)
		require.Equal(t, r.Serves(ServerBroker), inBr, proc)
	}
}

// A few rules that say something distinctive, as the servers read them.
func TestAccessRules(t *testing.T) {
	t.Parallel()
	all, err := AllAccessRules()
	require.NoError(t, err)
	for proc, want := range map[string]Rule{
		sluicev1connect.TenantServiceSignupProcedure:                {Caller: CallerPublic, ServedBy: []Server{ServerControlPlane}},
		sluicev1connect.TopicServiceCreateTopicProcedure:            {Caller: CallerTenant, Scopes: []string{ScopeAdmin}, ServedBy: []Server{ServerControlPlane}},
		sluicev1connect.OperatorServiceUpdateTenantProcedure:        {Caller: CallerOperator, ServedBy: []Server{ServerControlPlane}},
		sluicev1connect.BrokerServiceReserveObjectsProcedure:        {Caller: CallerBroker, ServedBy: []Server{ServerControlPlane}},
		sluicev1connect.RecordServiceGetMetadataProcedure:           {Caller: CallerTenant, ServedBy: []Server{ServerControlPlane, ServerBroker}},
		sluicev1connect.RecordServiceFetchProcedure:                 {Caller: CallerTenant, Scopes: []string{ScopeConsume}, BrokerForTenant: true, ServedBy: []Server{ServerBroker}},
		sluicev1connect.GroupServiceTxnCommitOffsetsProcedure:       {Caller: CallerTenant, Scopes: []string{ScopeProduce, ScopeConsume}, ServedBy: []Server{ServerBroker}},
		sluicev1connect.ReplicaServiceWriteTxnMarkersProcedure:      {Caller: CallerBroker, ServedBy: []Server{ServerBroker}},
		sluicev1connect.TransactionServiceListTransactionsProcedure: {Caller: CallerTenant, ServedBy: []Server{ServerBroker}},
	} {
		require.Equal(t, want, all[proc], proc)
	}
}

func TestAccessRuleMalformed(t *testing.T) {
	t.Parallel()
	cp := []sluicev1.Server{sluicev1.Server_SERVER_CONTROL_PLANE}
	for _, c := range []struct {
		a    *sluicev1.Access
		want string
	}{
		{nil, "no (sluice.v1.access) option"},
		{&sluicev1.Access{ServedBy: cp}, "want a caller"},
		{&sluicev1.Access{Caller: sluicev1.Caller_CALLER_TENANT}, "served_by names no server"},
		{&sluicev1.Access{Caller: sluicev1.Caller_CALLER_BROKER, Scopes: []string{ScopeAdmin}, ServedBy: cp}, "scopes are for a tenant caller"},
		{&sluicev1.Access{Caller: sluicev1.Caller_CALLER_TENANT, Scopes: []string{"root"}, ServedBy: cp}, `unknown scope "root"`},
		{&sluicev1.Access{Caller: sluicev1.Caller_CALLER_OPERATOR, BrokerForTenant: true, ServedBy: cp}, "broker_for_tenant is for a tenant caller"},
		{&sluicev1.Access{Caller: sluicev1.Caller_CALLER_PUBLIC, ServedBy: []sluicev1.Server{0}}, "want a server"},
	} {
		_, err := ruleOf(c.a)
		require.ErrorContains(t, err, c.want)
	}
	r, err := ruleOf(&sluicev1.Access{Caller: sluicev1.Caller_CALLER_TENANT, Scopes: []string{ScopeProduce}, ServedBy: cp})
	require.NoError(t, err)
	require.Equal(t, Rule{Caller: CallerTenant, Scopes: []string{ScopeProduce}, ServedBy: []Server{ServerControlPlane}}, r)
}
