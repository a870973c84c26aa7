package tenants

import (
	"testing"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// With mutual TLS inside the cluster, a call's message that names the
// calling broker must name the broker of its certificate.
func TestCheckNamedBroker(t *testing.T) {
	t.Parallel()
	b2 := Principal{Kind: PrincipalBroker, Peer: tlsfiles.BrokerURI(2)}
	cp := Principal{Kind: PrincipalBroker, Peer: tlsfiles.ControlPlaneURI}
	require.Equal(t, tlsfiles.BrokerURI(2), BrokerIdentity(2))
	require.NoError(t, checkNamedBroker(b2, &sluicev1.HeartbeatBrokerRequest{BrokerId: 2}))
	require.NoError(t, checkNamedBroker(b2, &sluicev1.FetchReplicasRequest{FollowerId: 2}))
	require.NoError(t, checkNamedBroker(b2, &sluicev1.ListGroupLagsRequest{}), "names no broker")
	require.NoError(t, checkNamedBroker(cp, &sluicev1.ListGroupLagsRequest{}))
	require.NoError(t, checkNamedBroker(Principal{Kind: PrincipalBroker}, &sluicev1.HeartbeatBrokerRequest{BrokerId: 3}), "no mutual TLS: the token alone")
	for _, c := range []struct {
		p   Principal
		msg any
	}{
		{b2, &sluicev1.HeartbeatBrokerRequest{BrokerId: 3}},
		{b2, &sluicev1.RegisterBrokerRequest{BrokerId: 0}},
		{b2, &sluicev1.FetchReplicasRequest{FollowerId: 1}},
		{cp, &sluicev1.HeartbeatBrokerRequest{BrokerId: 2}},
	} {
		err := checkNamedBroker(c.p, c.msg)
		require.ErrorIs(t, err, ErrPermissionDenied, "%s %v", c.p.Peer, c.msg)
		require.ErrorContains(t, err, "TLS certificate")
	}
}
