package testcluster

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// RemoteSegments asks the control plane, with the broker credential, for a
// partition's remote segment metadata (tiered storage), every state, in
// base-offset order.
func (c *Cluster) RemoteSegments(ctx context.Context, topicID string, partition int32) ([]*sluicev1.RemoteSegment, error) {
	bs := sluicev1connect.NewBrokerServiceClient(c.hc, c.ControlPlane(), connect.WithGRPC(), bearer(c.brokerToken))
	res, err := bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topicID, Partition: partition}))
	if err != nil {
		return nil, fmt.Errorf("list remote segments of %s/%d: %w", topicID, partition, err)
	}
	return res.Msg.GetSegments(), nil
}

// HTTPClient is the cluster's HTTP/2 client (cleartext, or over TLS
// trusting the cluster's CA with Options.TLS; e.g. to scrape a broker's
// /metrics on its Broker.MetricsAddr).
func (c *Cluster) HTTPClient() *http.Client { return c.hc }

// AsServer returns an HTTP/2 client that presents cert (a certificate
// and key, such as another process's from IssueServer) to the cluster's
// listeners and trusts the cluster's CA (Options.TLS), and the broker
// credential to call with: a test plays a server of the cluster with it.
func (c *Cluster) AsServer(cert tlsfiles.Files) (*http.Client, connect.ClientOption) {
	c.t.Helper()
	cert.CA = c.CAFile
	src, err := tlsfiles.Load(cert, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return src.HTTPClient(), bearer(c.brokerToken)
}
