package broker

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/access"
	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants"
)

// newTestBroker is a broker that is never started: enough for partition
// logic that needs its config, logger and metadata.
func newTestBroker(t *testing.T) *Broker {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.DataDir = t.TempDir()
	cfg.BrokerToken = "broker-token-0123456789"
	b, err := New(cfg, Deps{})
	require.NoError(t, err)
	return b
}

func TestBrokerFailStopCancelsRun(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	b.stopRun = cancel
	b.failStop("topic-1", 0, errors.New("disk on fire"))
	<-ctx.Done()
	require.ErrorContains(t, context.Cause(ctx), "partition topic-1/0 log failed: disk on fire")
}

func TestBrokerFailsClosedUntilRevocationsLoad(t *testing.T) {
	t.Parallel()
	iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	k, err := tenants.GenerateSigningKey(time.Now().Add(-time.Minute))
	require.NoError(t, err)
	iss.SetKeys([]tenants.SigningKey{k})
	tok, _, err := iss.Mint(time.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: []string{tenants.ScopeConsume}})
	require.NoError(t, err)
	revoked := access.NewRevocations()
	a := connectapi.Authenticator{Authenticator: access.NewAuthenticator(
		tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice"}, iss.KeySource()), revoked, "broker-token-0123456789")}
	h := http.Header{"Authorization": []string{"Bearer " + tok}}
	const fetch = "/sluice.v1.RecordService/Fetch"
	_, err = a.Authenticate(context.Background(), fetch, h)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "no answer from the revocation feed yet")

	revoked.MarkLoaded()
	p, err := a.Authenticate(context.Background(), fetch, h)
	require.NoError(t, err)
	require.Equal(t, "t1", p.TenantID)

	revoked.Add("0123456789abcdef", time.Now().Add(time.Hour))
	_, err = a.Authenticate(context.Background(), fetch, h)
	require.ErrorContains(t, err, "revoked")
}

// TestBrokerFindCoordinatorWhileItsBrokerIsGone: while the metadata still
// names a coordinator whose broker left the live list (its lease expired,
// no new leader elected yet), FindCoordinator answers Unavailable (retry),
// not an empty address; once that broker is back it answers its address.
func TestBrokerFindCoordinatorWhileItsBrokerIsGone(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	meta := cluster.EmptyView()
	ot := &cluster.Topic{TenantID: systemTenantID, ID: "offsets", Name: offsetsTopic}
	for i := range int32(4) {
		ot.Partitions = append(ot.Partitions, cluster.Partition{Partition: i, Replicas: []int32{2}, Leader: 2, LeaderEpoch: 1})
	}
	meta.AddTopic(ot)
	b.meta.Store(meta)
	gs := b.groupsHandler()
	ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1"})
	req := connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: "billing"})
	_, err := gs.FindCoordinator(ctx, req)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(toConnect(err)), "%v", err)

	meta.Brokers[2] = cluster.Node{ID: 2, Address: "127.0.0.1:9002"}
	res, err := gs.FindCoordinator(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9002", res.Msg.GetAddress())
	require.EqualValues(t, 2, res.Msg.GetBrokerId())
}

// TestBrokerNotLeaderForwardedOnlyToAnotherBroker: the NotLeader answer
// for a partition the metadata says this very broker leads (its replica
// has not taken over yet) is Unavailable and never forwarded (issue 12: a
// client following it looped back to the same broker); one naming another
// broker is FailedPrecondition with that broker's address, and forwarded
// unless the caller routes itself. (TestPartitionNamedLeaderNotTakenOverIsUnavailable:
// the replica answers a produce with these.)
func TestBrokerNotLeaderForwardedOnlyToAnotherBroker(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	meta := cluster.EmptyView()
	meta.Brokers[2] = cluster.Node{ID: 2, Address: "127.0.0.1:9002"}
	b.meta.Store(meta)

	self := b.notLeader(cluster.Partition{Leader: 1, LeaderEpoch: 4})
	require.False(t, connectapi.Forwardable(http.Header{}, self), "never forwarded to itself")
	err := toConnect(self)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "is named the leader at epoch 4 but is not leading")

	other := b.notLeader(cluster.Partition{Leader: 2, LeaderEpoch: 4})
	require.True(t, connectapi.Forwardable(http.Header{}, other))
	require.False(t, connectapi.Forwardable(http.Header{NoForwardHeader: []string{"1"}}, other))
	err = toConnect(other)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	var nl *partition.NotLeaderError
	require.ErrorAs(t, err, &nl)
	require.Equal(t, "127.0.0.1:9002", nl.Address)
}
