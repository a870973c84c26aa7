package connectapi

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/kafka"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/topicconfig"
)

// KafkaAdmin is the Kafka listener's topic administration: the control
// plane's TopicService, called with the Kafka session's credential, its
// answers relayed as domain errors.
type KafkaAdmin struct {
	Topics sluicev1connect.TopicServiceClient
}

var _ kafka.Admin = KafkaAdmin{}

func withHeader[T any](msg *T, h http.Header) *connect.Request[T] {
	r := connect.NewRequest(msg)
	for k, v := range h {
		r.Header()[k] = v
	}
	return r
}

func (a KafkaAdmin) CreateTopic(ctx context.Context, h http.Header, name string, partitions, rf int32, configs map[string]string) error {
	cfg := &sluicev1.TopicConfig{}
	for k, v := range configs {
		if err := topicconfig.Set(cfg, k, v); err != nil {
			return derr.Wrap(derr.InvalidRequest, err)
		}
	}
	_, err := a.Topics.CreateTopic(ctx, withHeader(&sluicev1.CreateTopicRequest{Name: name, PartitionCount: partitions, ReplicationFactor: rf, Config: cfg}, h))
	return connecterr.Relay(err)
}

func (a KafkaAdmin) DeleteTopic(ctx context.Context, h http.Header, name string) error {
	_, err := a.Topics.DeleteTopic(ctx, withHeader(&sluicev1.DeleteTopicRequest{Name: name}, h))
	return connecterr.Relay(err)
}

func (a KafkaAdmin) CreatePartitions(ctx context.Context, h http.Header, name string, count int32) error {
	_, err := a.Topics.CreatePartitions(ctx, withHeader(&sluicev1.CreatePartitionsRequest{Name: name, PartitionCount: count}, h))
	return connecterr.Relay(err)
}

func (a KafkaAdmin) TopicConfigs(ctx context.Context, h http.Header, name string) ([]kafka.Config, error) {
	res, err := a.Topics.DescribeTopic(ctx, withHeader(&sluicev1.DescribeTopicRequest{Name: name}, h))
	if err != nil {
		return nil, connecterr.Relay(err)
	}
	var out []kafka.Config
	for _, kv := range topicconfig.Values(res.Msg.GetTopic().GetConfig()) {
		out = append(out, kafka.Config{Name: kv[0], Value: kv[1]})
	}
	return out, nil
}

func (a KafkaAdmin) AlterTopicConfigs(ctx context.Context, h http.Header, name string, set map[string]*string) error {
	cfg := &sluicev1.TopicConfig{}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		v := set[k]
		if v == nil {
			return derr.New(derr.InvalidRequest, "config %s: resetting a topic config to its default is not supported; set the value", k)
		}
		if err := topicconfig.Set(cfg, k, *v); err != nil {
			return derr.Wrap(derr.InvalidRequest, err)
		}
	}
	_, err := a.Topics.UpdateTopicConfig(ctx, withHeader(&sluicev1.UpdateTopicConfigRequest{Name: name, Config: cfg}, h))
	return connecterr.Relay(err)
}

// KafkaExchange is the Kafka listener's SASL PLAIN exchange: the control
// plane's CreateToken for the API key, on behalf of the client at
// clientAddr (host:port), which the control plane's per-address limit of
// bad keys counts instead of the broker (the header
// api.ClientAddressHeader, believed with brokerToken).
func KafkaExchange(auth sluicev1connect.AuthServiceClient, brokerToken string) kafka.Exchange {
	return func(ctx context.Context, apiKey, clientAddr string) (kafka.Token, error) {
		req := connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: apiKey})
		if host, _, err := net.SplitHostPort(clientAddr); err == nil {
			req.Header().Set("Authorization", "Bearer "+brokerToken)
			req.Header().Set(clientAddressHeader, host)
		}
		res, err := auth.CreateToken(ctx, req)
		if err != nil {
			return kafka.Token{}, connecterr.Relay(err)
		}
		m := res.Msg
		return kafka.Token{Token: m.GetToken(), TenantID: m.GetTenantId(), TenantName: m.GetTenantName(), Expires: m.GetExpireTime().AsTime()}, nil
	}
}

// clientAddressHeader is controlplane/api's ClientAddressHeader (the data
// plane does not import the control plane).
const clientAddressHeader = "Sluice-Client-Address"
