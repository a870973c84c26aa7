package controlplane

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane/clientlimit"
	"github.com/sluicemq/sluice/controlplane/controller"
	"github.com/sluicemq/sluice/internal/httpgate"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// Config is the control plane's configuration. RegisterFlags binds it to
// command-line flags; Validate names the first bad field.
type Config struct {
	ListenAddr string
	// MetricsAddr is where the operator listener binds (metrics, health;
	// see internal/opshttp); empty: no operator listener. Like ListenAddr,
	// the caller binds it and hands the listener to Run.
	MetricsAddr string
	// ExternalListenAddr, when set, is a second API listener for clients
	// outside the cluster: GetMetadata there names the brokers' external
	// addresses. The caller binds it and hands it to New (Deps.External).
	ExternalListenAddr string
	// TLS holds the TLS files of the API and operator listeners and of
	// the calls to the brokers.
	TLS                      tlsfiles.ServerFiles
	DatabaseURL              string
	Issuer                   string
	Audience                 string
	TokenTTL                 time.Duration
	KeyRotation              time.Duration
	OperatorToken            string
	BrokerToken              string
	BrokerLease              time.Duration
	DefaultReplicationFactor int
	// OffsetsTopicPartitions and OffsetsTopicReplicationFactor shape the
	// internal topic of consumer groups' committed offsets, created once
	// that many brokers are live.
	OffsetsTopicPartitions        int
	OffsetsTopicReplicationFactor int
	// TransactionStateTopicPartitions and
	// TransactionStateTopicReplicationFactor shape the internal topic of
	// the transaction coordinators' state, created once that many brokers
	// are live.
	TransactionStateTopicPartitions        int
	TransactionStateTopicReplicationFactor int
	MaxRequestBytes                        int
	// RequestMemory bounds the requests in flight (internal/httpgate).
	RequestMemory   httpgate.Flags
	ShutdownTimeout time.Duration
	// LagSampleInterval is how often consumer groups are sampled for lag
	// alerts (0 turns lag alerts off); LagWindow how much history a
	// forecast fits.
	LagSampleInterval time.Duration
	LagWindow         time.Duration
	// LagAlertPolicy holds the alerts' for-durations and thresholds (zero
	// fields: alerts.DefaultPolicy); not a flag.
	LagAlertPolicy alerts.Policy
	// WebhookAllowInsecureLoopback lets tenants register webhooks on
	// loopback addresses, over plain http:// too (`sluice dev`, tests).
	WebhookAllowInsecureLoopback bool
	// Controller configures this replica's candidate controller (its
	// StartupGrace is always BrokerLease).
	Controller controller.Config
	// ClientLimits rate-limit Signup and bad-key CreateToken calls per
	// client address.
	ClientLimits clientlimit.Config
	// MeteringInterval is how often the control plane's usage meters
	// (storage and partition byte/partition-seconds) advance;
	// BillingInterval how often the billing job recomputes drafts and
	// finalizes closed months (controlplane/metering).
	MeteringInterval time.Duration
	BillingInterval  time.Duration
}

// DefaultMetricsAddr is the control plane's operator listener unless
// --metrics-addr says otherwise: loopback only, and not Prometheus's own
// 9090, so a Prometheus on the same host can scrape it.
const DefaultMetricsAddr = "127.0.0.1:9643"

// DefaultConfig returns the defaults RegisterFlags uses.
func DefaultConfig() Config {
	return Config{
		ListenAddr:                             "127.0.0.1:8080",
		MetricsAddr:                            DefaultMetricsAddr,
		Issuer:                                 "sluice",
		Audience:                               "sluice",
		TokenTTL:                               15 * time.Minute,
		KeyRotation:                            24 * time.Hour,
		BrokerLease:                            10 * time.Second,
		DefaultReplicationFactor:               3,
		OffsetsTopicPartitions:                 system.DefaultOffsetsTopicPartitions,
		OffsetsTopicReplicationFactor:          system.DefaultOffsetsTopicReplicationFactor,
		TransactionStateTopicPartitions:        system.DefaultTransactionStateTopicPartitions,
		TransactionStateTopicReplicationFactor: system.DefaultTransactionStateTopicReplicationFactor,
		MaxRequestBytes:                        1 << 20,
		RequestMemory:                          httpgate.DefaultFlags(),
		ShutdownTimeout:                        10 * time.Second,
		LagSampleInterval:                      30 * time.Second,
		LagWindow:                              time.Hour,
		LagAlertPolicy:                         alerts.DefaultPolicy(),
		Controller:                             controller.DefaultConfig(),
		ClientLimits:                           clientlimit.DefaultConfig(),
		MeteringInterval:                       10 * time.Second,
		BillingInterval:                        time.Minute,
	}
}

// RegisterFlags binds the config to flags, with c's current values as defaults.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ListenAddr, "listen-addr", c.ListenAddr, "host:port to serve the Connect/gRPC API, JWKS, /healthz and /readyz on (tenants reach it; it serves no metrics)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "host:port of the operator listener: Prometheus metrics at /metrics, /healthz and /readyz, and Go profiles (pprof) under /debug/pprof/. Metric labels name tenants, topics and consumer groups, and profiles show its allocations and goroutines: bind it to loopback (the default) or an interface only operators and Prometheus reach, never one tenants reach. Empty turns it off")
	fs.StringVar(&c.ExternalListenAddr, "external-listen-addr", c.ExternalListenAddr, "host:port of a second API listener for clients outside the cluster (Kafka's external listener): the same API, but metadata answers there name the brokers' external addresses (their --external-advertised-addr), and the brokers' BrokerService is not served. Empty: none")
	c.TLS.RegisterFlags(fs)
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "metadata store: postgres://user:pass@host/db (production) or sqlite:PATH (single node)")
	fs.StringVar(&c.Issuer, "issuer", c.Issuer, "JWT issuer (iss) this control plane signs and brokers expect")
	fs.StringVar(&c.Audience, "audience", c.Audience, "JWT audience (aud) for tenant tokens")
	fs.DurationVar(&c.TokenTTL, "token-ttl", c.TokenTTL, "lifetime of tenant JWTs minted from API keys")
	fs.DurationVar(&c.KeyRotation, "key-rotation", c.KeyRotation, "how often a new JWT signing key replaces the active one (old keys verify until their tokens expire)")
	fs.StringVar(&c.OperatorToken, "operator-token", c.OperatorToken, "secret bearer token for the OperatorService; empty disables it")
	fs.StringVar(&c.BrokerToken, "broker-token", c.BrokerToken, "secret bearer token brokers authenticate with; empty disables the BrokerService")
	fs.DurationVar(&c.BrokerLease, "broker-lease", c.BrokerLease, "a broker without a heartbeat for this long is considered dead")
	fs.IntVar(&c.DefaultReplicationFactor, "default-replication-factor", c.DefaultReplicationFactor, "replication factor for topics created without one")
	fs.DurationVar(&c.LagSampleInterval, "lag-sample-interval", c.LagSampleInterval, "how often every consumer group × partition is sampled for lag alerts (0 turns lag alerts off); brokers compute lag every --group-lag-metrics-interval, so sampling faster than that repeats samples")
	fs.DurationVar(&c.LagAlertPolicy.RiskFor, "lag-alert-risk-for", c.LagAlertPolicy.RiskFor, "how long a retention-expiry risk must hold before its alert fires")
	fs.DurationVar(&c.LagAlertPolicy.GrowingFor, "lag-alert-growing-for", c.LagAlertPolicy.GrowingFor, "how long lag age must keep growing before the lag-growing alert fires")
	fs.DurationVar(&c.LagAlertPolicy.ResolveAfter, "lag-alert-resolve-after", c.LagAlertPolicy.ResolveAfter, "how long a firing alert's condition must be gone before it resolves")
	fs.DurationVar(&c.LagWindow, "lag-window", c.LagWindow, "how much lag history a forecast fits (the lag-age growth rate is the least-squares slope over it, or the faster rate a fit of its last 5 or 15 minutes proves)")
	fs.BoolVar(&c.WebhookAllowInsecureLoopback, "webhook-allow-insecure-loopback", c.WebhookAllowInsecureLoopback, "let alert webhooks call loopback addresses, over plain http:// too (for 'sluice dev' and tests; never in production, where webhooks are https:// to public addresses only)")
	fs.IntVar(&c.OffsetsTopicPartitions, "offsets-topic-partitions", c.OffsetsTopicPartitions, "partitions of the internal topic holding consumer groups' offsets (each partition's leader coordinates its groups); fixed once created")
	fs.IntVar(&c.OffsetsTopicReplicationFactor, "offsets-topic-replication-factor", c.OffsetsTopicReplicationFactor, "replication factor of the internal offsets topic; it is created once this many brokers are live, and consumer groups are unavailable until then")
	fs.IntVar(&c.TransactionStateTopicPartitions, "transaction-state-topic-partitions", c.TransactionStateTopicPartitions, "partitions of the internal topic holding the transaction coordinators' state (each partition's leader coordinates the transactional ids that hash to it); fixed once created")
	fs.IntVar(&c.TransactionStateTopicReplicationFactor, "transaction-state-topic-replication-factor", c.TransactionStateTopicReplicationFactor, "replication factor of the internal transaction-state topic; it is created once this many brokers are live, and transactions are unavailable until then")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest request message accepted, in bytes")
	c.RequestMemory.RegisterFlags(fs)
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long to drain in-flight requests on shutdown")
	fs.DurationVar(&c.MeteringInterval, "metering-interval", c.MeteringInterval, "how often the control plane counts each tenant's cold and hot storage byte-seconds and partition-seconds for billing (each interval is counted once whatever the replicas; a holding is counted as it is at the interval's end)")
	fs.DurationVar(&c.BillingInterval, "billing-interval", c.BillingInterval, "how often the billing job recomputes the open month's draft invoices from usage and finalizes those of closed months (0 turns it off on this replica)")
	c.Controller.RegisterFlags(fs)
	c.ClientLimits.RegisterFlags(fs)
}

// Validate checks the config and names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.ListenAddr == "":
		return errors.New("--listen-addr is required")
	case c.MetricsAddr != "" && !validHostPort(c.MetricsAddr):
		return fmt.Errorf("--metrics-addr must be host:port (or empty for no operator listener); got %q", c.MetricsAddr)
	case c.DatabaseURL == "":
		return errors.New("--database-url is required (postgres://… or sqlite:PATH)")
	case !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") && !strings.HasPrefix(c.DatabaseURL, "sqlite:"):
		return fmt.Errorf("--database-url must start with postgres://, postgresql:// or sqlite:; got %q", redact(c.DatabaseURL))
	case c.Issuer == "":
		return errors.New("--issuer must not be empty")
	case c.Audience == "":
		return errors.New("--audience must not be empty")
	case c.TokenTTL < time.Minute || c.TokenTTL > tenants.MaxTokenTTL:
		return fmt.Errorf("--token-ttl must be between 1m and %s; got %s", tenants.MaxTokenTTL, c.TokenTTL)
	case c.KeyRotation < c.TokenTTL:
		return fmt.Errorf("--key-rotation (%s) must be at least --token-ttl (%s)", c.KeyRotation, c.TokenTTL)
	case c.OperatorToken != "" && len(c.OperatorToken) < 16:
		return errors.New("--operator-token must be at least 16 characters")
	case c.BrokerToken != "" && len(c.BrokerToken) < 16:
		return errors.New("--broker-token must be at least 16 characters")
	case c.BrokerLease < time.Second:
		return fmt.Errorf("--broker-lease must be at least 1s; got %s", c.BrokerLease)
	case c.LagSampleInterval != 0 && c.LagSampleInterval < 100*time.Millisecond:
		return fmt.Errorf("--lag-sample-interval must be 0 (off) or at least 100ms; got %s", c.LagSampleInterval)
	case c.LagAlertPolicy.RiskFor < 0 || c.LagAlertPolicy.GrowingFor < 0 || c.LagAlertPolicy.ResolveAfter < 0:
		return errors.New("--lag-alert-risk-for, --lag-alert-growing-for and --lag-alert-resolve-after must not be negative")
	case c.LagSampleInterval > 0 && c.LagWindow < 4*c.LagSampleInterval:
		return fmt.Errorf("--lag-window must hold at least 4 samples (4 × --lag-sample-interval %s); got %s", c.LagSampleInterval, c.LagWindow)
	case c.OffsetsTopicPartitions < 1 || c.OffsetsTopicPartitions > 1000:
		return fmt.Errorf("--offsets-topic-partitions must be between 1 and 1000; got %d", c.OffsetsTopicPartitions)
	case c.OffsetsTopicReplicationFactor < 1 || c.OffsetsTopicReplicationFactor > 7:
		return fmt.Errorf("--offsets-topic-replication-factor must be between 1 and 7; got %d", c.OffsetsTopicReplicationFactor)
	case c.TransactionStateTopicPartitions < 1 || c.TransactionStateTopicPartitions > 1000:
		return fmt.Errorf("--transaction-state-topic-partitions must be between 1 and 1000; got %d", c.TransactionStateTopicPartitions)
	case c.TransactionStateTopicReplicationFactor < 1 || c.TransactionStateTopicReplicationFactor > 7:
		return fmt.Errorf("--transaction-state-topic-replication-factor must be between 1 and 7; got %d", c.TransactionStateTopicReplicationFactor)
	case c.DefaultReplicationFactor < 1 || c.DefaultReplicationFactor > 7:
		return fmt.Errorf("--default-replication-factor must be between 1 and 7; got %d", c.DefaultReplicationFactor)
	case c.MaxRequestBytes < 1<<10 || c.MaxRequestBytes > 64<<20:
		return fmt.Errorf("--max-request-bytes must be between 1 KiB and 64 MiB; got %d", c.MaxRequestBytes)
	case c.MeteringInterval < 100*time.Millisecond || c.MeteringInterval > time.Hour:
		return fmt.Errorf("--metering-interval must be between 100ms and 1h; got %s", c.MeteringInterval)
	case c.BillingInterval != 0 && (c.BillingInterval < 100*time.Millisecond || c.BillingInterval > 24*time.Hour):
		return fmt.Errorf("--billing-interval must be 0 (off) or between 100ms and 24h; got %s", c.BillingInterval)
	}
	if err := c.ClientLimits.Validate(); err != nil {
		return err
	}
	if c.ExternalListenAddr != "" && !validHostPort(c.ExternalListenAddr) {
		return fmt.Errorf("--external-listen-addr must be host:port (or empty for none); got %q", c.ExternalListenAddr)
	}
	if c.ExternalListenAddr == "" && c.TLS.External != (tlsfiles.Files{}) {
		return errors.New("--external-tls-* need --external-listen-addr")
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	if err := c.RequestMemory.Validate(); err != nil {
		return err
	}
	return c.Controller.Validate()
}

func validHostPort(addr string) bool {
	_, _, err := net.SplitHostPort(addr)
	return err == nil
}

// redact hides passwords in a database URL for messages and logs: the
// userinfo password and password-like query parameters.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.Redacted()
}
