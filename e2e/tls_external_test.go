package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// TestTLSExternalListeners: every server has an internal API listener
// (mutual TLS: only holders of a certificate from the cluster's CA get
// in) and an external one (TLS for anyone). A client outside the cluster,
// with no certificate, cannot use the internal listeners; through the
// control plane's external listener it learns the brokers' external
// addresses, and produces, consumes and joins a consumer group through
// them alone (the group coordinator's and a not-leader answer's addresses
// are external too). The external listeners do not serve the services
// only the cluster's servers call.
func TestTLSExternalListeners(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: plainBin, DatabaseURL: testenv.PostgresURL(t), TLS: true, External: true})
	tc := c.NewClient(t, "outsider", "orders", 3, 2)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(c.CA.CertPEM()))
	outside := &tls.Config{RootCAs: pool}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	_, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey), client.WithTLS(outside))
	require.Error(t, err, "the internal control plane listener let in a client without a certificate")

	var p http.Protocols
	p.SetHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: outside}}
	bearer := connect.WithInterceptors(tenants.Bearer(tc.Token()))
	md, err := sluicev1connect.NewRecordServiceClient(hc, c.ExternalControlPlane(), bearer).
		GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{"orders"}}))
	require.NoError(t, err)
	require.Len(t, md.Msg.GetBrokers(), 3)
	for _, b := range md.Msg.GetBrokers() {
		require.Equal(t, c.URL(c.Broker(b.GetId()).ExternalAddr), b.GetAddress())
	}

	cl, err := client.New(ctx, c.ExternalControlPlane(), client.APIKey(tc.APIKey), client.WithTLS(outside))
	require.NoError(t, err)
	defer cl.Close()
	pr, err := cl.NewProducer(ctx)
	require.NoError(t, err)
	run := produceSteadily(t, pr, "orders", 300, 1000)
	require.Empty(t, run.failed)
	require.NoError(t, pr.Close(ctx))
	require.Zero(t, judge(run, readBack(t, cl, "orders")).lost)

	gc, err := cl.NewGroupConsumer(ctx, "outside-group", []string{"orders"})
	require.NoError(t, err)
	got := 0
	for got < 300 {
		recs, err := gc.Poll(ctx)
		require.NoError(t, err, "after %d records", got)
		got += len(recs)
	}
	require.NoError(t, gc.Close(ctx))

	// The coordinator, and a leader named by a not-leader answer, at
	// their external addresses.
	fc, err := sluicev1connect.NewGroupServiceClient(hc, c.URL(c.Broker(1).ExternalAddr), bearer).
		FindCoordinator(ctx, connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: "outside-group"}))
	require.NoError(t, err)
	require.Equal(t, c.URL(c.Broker(fc.Msg.GetBrokerId()).ExternalAddr), fc.Msg.GetAddress())
	leaders := tc.NewestMetadata(ctx)
	leader := leaders[0].Leader
	other := int32(1)
	if leader == 1 {
		other = 2
	}
	noForward := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Sluice-No-Forward", "1")
			return next(ctx, req)
		}
	}))
	_, err = sluicev1connect.NewRecordServiceClient(hc, c.URL(c.Broker(other).ExternalAddr), bearer, noForward).
		ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}))
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	var nl *sluicev1.NotLeader
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if n, ok := v.(*sluicev1.NotLeader); ok {
				nl = n
			}
		}
	}
	require.NotNil(t, nl, "a not-leader answer: %v", err)
	require.Equal(t, c.URL(c.Broker(nl.GetLeaderId()).ExternalAddr), nl.GetLeaderAddress())

	// Not served there: the brokers' ReplicaService, the control plane's
	// BrokerService.
	_, err = sluicev1connect.NewReplicaServiceClient(hc, c.URL(c.Broker(1).ExternalAddr)).
		ListAllTransactions(ctx, connect.NewRequest(&sluicev1.ListAllTransactionsRequest{}))
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "%v", err)
	_, err = sluicev1connect.NewBrokerServiceClient(hc, c.ExternalControlPlane()).
		ListRevokedAPIKeys(ctx, connect.NewRequest(&sluicev1.ListRevokedAPIKeysRequest{}))
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "%v", err)
}
