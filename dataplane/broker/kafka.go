package broker

import (
	"github.com/sluicemq/sluice/dataplane/access"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/kafka"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// newKafka wires the Kafka listener (dataplane/kafka) to the broker's
// record service, cluster view, authenticator and quotas, and to the
// control plane for SASL PLAIN's key exchange and topic administration.
func (b *Broker) newKafka(auth *access.Authenticator, cpURL string) *kafka.Server {
	return kafka.New(kafka.Deps{
		BrokerID:        b.cfg.ID,
		ClusterID:       b.cfg.Issuer,
		Records:         b.records,
		View:            b.metadata,
		Auth:            auth,
		Exchange:        connectapi.KafkaExchange(sluicev1connect.NewAuthServiceClient(b.hc, cpURL), b.cfg.BrokerToken),
		AdmitCall:       b.quota.AdmitCall,
		Admin:           connectapi.KafkaAdmin{Topics: sluicev1connect.NewTopicServiceClient(b.hc, cpURL)},
		Groups:          b.groups,
		Txns:            b.txns,
		MaxRequestBytes: b.cfg.MaxRequestBytes,
		MaxConnections:  b.cfg.KafkaMaxConnections,
		Logger:          b.logger,
		Registerer:      b.registry,
	})
}
