package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/dataplane/broker"
)

func (a *app) brokerCommand() *cobra.Command {
	cfg := broker.DefaultConfig()
	cmd := &cobra.Command{
		Use:         "broker",
		Annotations: map[string]string{envFlags: "true"},
		Short:       "Run a data-plane broker: partition replicas, produce/fetch, replication",
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
			return runBroker(cmd.Context(), cfg, logger, nil)
		},
	}
	cfg.RegisterFlags(cmd.Flags())
	return cmd
}

// runBroker serves a broker until ctx ends. With an advertised address
// left empty and a listen port of 0, the bound address is advertised.
func runBroker(ctx context.Context, cfg broker.Config, logger *slog.Logger, ready func(addr string)) error {
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.ListenAddr, err)
	}
	if cfg.AdvertisedAddr == "" {
		cfg.AdvertisedAddr = ln.Addr().String()
	}
	b, err := broker.New(cfg, broker.Deps{Logger: logger})
	if err != nil {
		ln.Close()
		return err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	return b.Run(ctx, ln)
}
