package testcluster

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// RemoteSegments asks the control plane, with the broker credential, for a
// partition's remote segment metadata (tiered storage), every state, in
// base-offset order.
func (c *Cluster) RemoteSegments(ctx context.Context, topicID string, partition int32) ([]*sluicev1.RemoteSegment, error) {
	bs := sluicev1connect.NewBrokerServiceClient(c.hc, c.ControlPlane(), connect.WithGRPC(), bearer(brokerToken))
	res, err := bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topicID, Partition: partition}))
	if err != nil {
		return nil, fmt.Errorf("list remote segments of %s/%d: %w", topicID, partition, err)
	}
	return res.Msg.GetSegments(), nil
}

// HTTPClient is the cluster's HTTP/2 cleartext client (e.g. to scrape a
// broker's /metrics on its Broker.MetricsAddr).
func (c *Cluster) HTTPClient() *http.Client { return c.hc }
