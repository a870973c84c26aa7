package broker

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants"
)

// TestBrokerStartingBrokerAnswersUnavailable: a broker that has not
// received its first assignments yet does not know any topic, and says so
// with Unavailable (retry) rather than NotFound (the topic does not exist),
// which clients treat as final; with a view, an unknown topic is NotFound.
func TestBrokerStartingBrokerAnswersUnavailable(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	s := b.recordsAPI
	ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1"})
	// Every record request resolves its partition first (ListOffsets here).
	earliest := connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST})
	_, err := s.ListOffsets(ctx, earliest)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(toConnect(err)), "%v", err)
	require.ErrorContains(t, err, "has not received its assignments yet")
	_, err = s.GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{"orders"}}))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(toConnect(err)), "%v", err)

	b.meta.Store(toClusterMeta(&sluicev1.WatchAssignmentsResponse{MetadataVersion: 3}))
	_, err = s.ListOffsets(ctx, earliest)
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(toConnect(err)), "%v", err)
	_, err = s.GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{"orders"}}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(toConnect(err)), "%v", err)
}
