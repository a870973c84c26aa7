// Package brokernode builds the brokers of an in-process cluster
// (internal/localcluster) as dataplane/broker brokers: the half of the
// cluster's wiring that imports the broker, apart so that the broker's
// own tests can use the rest.
package brokernode

import (
	"log/slog"

	"github.com/sluicemq/sluice/dataplane/broker"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/tiered/objstore"
)

// Options say how New builds each broker.
type Options struct {
	// Config, when set, adjusts each broker's config after the spec's
	// fields (ID, data dir, control plane, token, rack, addresses) are
	// applied to broker.DefaultConfig.
	Config func(*broker.Config)
	// Logger is every broker's; the broker's default when nil.
	Logger *slog.Logger
	// TierStore, when set, is every broker's tiered storage (one bucket
	// the brokers share).
	TierStore objstore.Store
}

// New returns a localcluster.BrokerFunc that builds real brokers.
func New(opts Options) localcluster.BrokerFunc {
	return func(spec localcluster.BrokerSpec) (localcluster.Node, error) {
		return broker.New(Config(spec, opts.Config), broker.Deps{Logger: opts.Logger, TierStore: opts.TierStore, Interceptors: spec.Interceptors, Kafka: spec.Kafka})
	}
}

// Config is the broker config for spec: broker.DefaultConfig with the
// spec's fields, then adjusted by tweak when set.
func Config(spec localcluster.BrokerSpec, tweak func(*broker.Config)) broker.Config {
	bc := broker.DefaultConfig()
	bc.ID = spec.ID
	bc.DataDir = spec.DataDir
	bc.ControlPlane = spec.ControlPlane
	bc.BrokerToken = spec.BrokerToken
	bc.Rack = spec.Rack
	bc.ListenAddr, bc.AdvertisedAddr = spec.Addr, spec.Addr
	bc.TLS = spec.TLS
	bc.KafkaAddr, bc.KafkaAdvertisedAddr = spec.KafkaAddr, spec.KafkaAddr
	if tweak != nil {
		tweak(&bc)
	}
	return bc
}
