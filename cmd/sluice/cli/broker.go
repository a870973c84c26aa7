package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/dataplane/broker"
	"github.com/sluicemq/sluice/tiered/objstore"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
	"github.com/sluicemq/sluice/tiered/objstore/s3"
)

func (a *app) brokerCommand() *cobra.Command {
	cfg := broker.DefaultConfig()
	s3cfg := s3.DefaultConfig()
	var tierDir string
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a data-plane broker: partition replicas, produce/fetch, replication",
		Example: `  sluice broker --id 1 --listen-addr 0.0.0.0:9092 --advertised-addr broker-1:9092 \
    --data-dir /var/lib/sluice --control-plane http://cp:8080 --broker-token "$BT"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			logger, err := a.logger()
			if err != nil {
				return err
			}
			var store objstore.Store
			switch {
			case s3cfg.Bucket != "" && tierDir != "":
				return usageError{errors.New("choose one of --tier-s3-bucket and --tier-dir")}
			case s3cfg.Bucket != "":
				if err := s3cfg.Validate(); err != nil {
					return usageError{err}
				}
				s, err := s3.New(cmd.Context(), s3cfg)
				if err != nil {
					return fmt.Errorf("tiered storage: %w", err)
				}
				store = s
			case tierDir != "":
				s, err := folder.New(tierDir)
				if err != nil {
					return fmt.Errorf("tiered storage: %w", err)
				}
				store = s
			}
			return runBroker(cmd.Context(), cfg, logger, store, nil)
		},
	}
	cfg.RegisterFlags(cmd.Flags())
	s3cfg.RegisterFlags(cmd.Flags())
	cmd.Flags().StringVar(&tierDir, "tier-dir", "", "folder for tiered storage (one machine only, e.g. a mounted volume shared by nothing else); setting it turns tiered storage on")
	return cmd
}

// runBroker serves a broker until ctx ends. With an advertised address
// left empty and a listen port of 0, the bound address is advertised.
// ready, when not nil, is called with the bound addresses (the client
// port's, the operator listener's or "" without one).
func runBroker(ctx context.Context, cfg broker.Config, logger *slog.Logger, tier objstore.Store, ready func(addr, metricsAddr string)) error {
	ln, ops, err := listen(cfg.ListenAddr, cfg.MetricsAddr)
	if err != nil {
		return err
	}
	if cfg.AdvertisedAddr == "" {
		cfg.AdvertisedAddr = ln.Addr().String()
	}
	xln, err := listenExternal(cfg.ExternalListenAddr)
	if err != nil {
		closeListeners(ln, ops)
		return err
	}
	if xln != nil && cfg.ExternalAdvertisedAddr == "" {
		cfg.ExternalAdvertisedAddr = xln.Addr().String()
	}
	kln, err := listenOn("--kafka-addr", cfg.KafkaAddr)
	if err != nil {
		closeListeners(ln, ops, xln)
		return err
	}
	if kln != nil && cfg.KafkaAdvertisedAddr == "" {
		cfg.KafkaAdvertisedAddr = kln.Addr().String()
	}
	b, err := broker.New(cfg, broker.Deps{Logger: logger, TierStore: tier, External: xln, Kafka: kln})
	if err != nil {
		closeListeners(ln, ops, xln, kln)
		return err
	}
	if ready != nil {
		ready(ln.Addr().String(), addrOf(ops))
	}
	return b.Run(ctx, ln, ops)
}
