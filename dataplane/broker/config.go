package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/internal/httpgate"
	"github.com/sluicemq/sluice/internal/tlsfiles"

	"github.com/sluicemq/sluice/dataplane/log"
)

// Config is a broker's configuration. RegisterFlags binds it to flags;
// Validate names the first bad field.
type Config struct {
	ID             int32
	ListenAddr     string
	AdvertisedAddr string
	// MetricsAddr is where the operator listener binds (metrics, health;
	// see internal/opshttp); empty: no operator listener. Like ListenAddr,
	// the caller binds it and hands the listener to Run.
	MetricsAddr string
	// ExternalListenAddr, when set, is a second API listener for clients
	// outside the cluster (Kafka's EXTERNAL listener), advertised at
	// ExternalAdvertisedAddr; the caller binds it and hands it to New
	// (Deps.External).
	ExternalListenAddr, ExternalAdvertisedAddr string
	// KafkaAddr, when set, is the Kafka wire-protocol listener's address
	// (dataplane/kafka), advertised to Kafka clients at
	// KafkaAdvertisedAddr; the caller binds it and hands it to New
	// (Deps.Kafka).
	KafkaAddr, KafkaAdvertisedAddr string
	// KafkaMaxConnections bounds the Kafka listener's open connections.
	KafkaMaxConnections int
	// TLS holds the TLS files of the API and operator listeners and of
	// the calls to the control plane and the other brokers.
	TLS           tlsfiles.ServerFiles
	DataDir       string
	ControlPlane  string
	BrokerToken   string
	Rack          string
	Flush         string
	FlushInterval time.Duration
	Issuer        string
	Audience      string
	// ReplicaLagTimeMax: a follower that has not caught up for this long
	// leaves the ISR.
	ReplicaLagTimeMax time.Duration
	// SegmentBytes rolls partition log segments at this size.
	SegmentBytes int64
	// MaxOpenSegmentFiles bounds the partition log segment files the
	// broker keeps open (log.FileCache); 0: no limit.
	MaxOpenSegmentFiles int
	// SegmentAge rolls a partition's active segment once its oldest record
	// is this old (or a tenth of the topic's retention.ms, if shorter), so
	// time-based retention can delete it.
	SegmentAge time.Duration
	// RetentionCheckInterval is how often retention deletes old segments.
	RetentionCheckInterval time.Duration
	// GroupSessionTimeout: a consumer-group member silent this long is
	// removed and its partitions reassigned.
	GroupSessionTimeout time.Duration
	// GroupHeartbeatInterval is how often members heartbeat.
	GroupHeartbeatInterval time.Duration
	// GroupInitialRebalanceDelay holds the first join phase of an empty
	// group of Kafka's classic protocol this long for more members
	// (Kafka's group.initial.rebalance.delay.ms).
	GroupInitialRebalanceDelay time.Duration
	// GroupLagMetricsInterval is how often the broker computes the lag of
	// the consumer groups it coordinates for its metrics; 0 disables them.
	GroupLagMetricsInterval time.Duration
	// GroupLagMetricsMaxSeries caps the group lag label sets the broker
	// exports: the groups that lag least are exported per topic
	// (partition="all") to fit, or left out when even that does not.
	GroupLagMetricsMaxSeries int
	// TierCopyInterval is how often leaders copy closed segments to the
	// object store (with tiered storage).
	TierCopyInterval time.Duration
	// TierCacheDir caches chunks of remote segments (default
	// <data-dir>/.tier-cache); TierCacheBytes bounds it.
	TierCacheDir   string
	TierCacheBytes int64
	// TierMaxConcurrentReads and TierReadBytesPerSecond bound cold reads
	// from the object store, so they cannot starve the hot path.
	TierMaxConcurrentReads int
	TierReadBytesPerSecond int64
	// MaxTransactionTimeout caps the transaction timeout a transactional
	// producer may ask (InitProducerId).
	MaxTransactionTimeout time.Duration
	// TransactionalIDExpiration: a transactional id with no transaction
	// open and no change for this long is forgotten (its producer's next
	// InitProducerId starts afresh).
	TransactionalIDExpiration time.Duration
	// QuotaExchangeInterval is how often the broker reports its tenants'
	// traffic and holdings to the control plane and takes their new quota
	// allotments (dataplane/admission, wired in quota.go).
	QuotaExchangeInterval time.Duration
	// MaxRequestBytes caps every request message.
	MaxRequestBytes int
	// RequestMemory bounds the requests in flight (internal/httpgate).
	RequestMemory httpgate.Flags
	// ShutdownTimeout bounds the drain on shutdown.
	ShutdownTimeout time.Duration
	// UsageReportInterval is how often the broker reports its tenants'
	// metered usage to the control plane (dataplane/meter).
	UsageReportInterval time.Duration
}

// DefaultMetricsAddr is a broker's operator listener unless --metrics-addr
// says otherwise: loopback only, on the port Redpanda serves its metrics on.
// Several brokers on one host each need their own, like their own
// --listen-addr and --data-dir.
const DefaultMetricsAddr = "127.0.0.1:9644"

// DefaultConfig returns the defaults RegisterFlags uses.
func DefaultConfig() Config {
	return Config{
		ListenAddr:                 "127.0.0.1:9092",
		MetricsAddr:                DefaultMetricsAddr,
		DataDir:                    "./data",
		ControlPlane:               "http://127.0.0.1:8080",
		Flush:                      "always",
		FlushInterval:              10 * time.Millisecond,
		Issuer:                     "sluice",
		Audience:                   "sluice",
		ReplicaLagTimeMax:          30 * time.Second,
		SegmentBytes:               256 << 20,
		MaxOpenSegmentFiles:        1024,
		SegmentAge:                 7 * 24 * time.Hour,
		RetentionCheckInterval:     time.Minute,
		GroupSessionTimeout:        45 * time.Second,
		GroupHeartbeatInterval:     5 * time.Second,
		GroupInitialRebalanceDelay: 3 * time.Second,
		MaxRequestBytes:            16 << 20,
		RequestMemory:              httpgate.DefaultFlags(),
		ShutdownTimeout:            10 * time.Second,
		UsageReportInterval:        10 * time.Second,

		TierCopyInterval:       10 * time.Second,
		TierCacheBytes:         1 << 30,
		TierMaxConcurrentReads: 8,
		TierReadBytesPerSecond: 200 << 20,

		GroupLagMetricsInterval:  30 * time.Second,
		GroupLagMetricsMaxSeries: 10000,

		MaxTransactionTimeout:     15 * time.Minute,
		TransactionalIDExpiration: 7 * 24 * time.Hour,

		QuotaExchangeInterval: time.Second,
		KafkaMaxConnections:   10000,
	}
}

// RegisterFlags binds c to flags with c's values as defaults.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.Int32Var(&c.ID, "id", c.ID, "broker id, unique in the cluster (0 ≤ id < 2^31)")
	fs.StringVar(&c.ListenAddr, "listen-addr", c.ListenAddr, "host:port to serve clients and other brokers on (tenants reach it; it serves no metrics)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "host:port of the operator listener: Prometheus metrics at /metrics, /healthz and /readyz, and Go profiles (pprof) under /debug/pprof/. Metric labels name tenants, topics and consumer groups, and profiles show its allocations and goroutines: bind it to loopback (the default) or an interface only operators and Prometheus reach, never one tenants reach. Several brokers on one host need one each. Empty turns it off")
	fs.StringVar(&c.AdvertisedAddr, "advertised-addr", c.AdvertisedAddr, "host:port clients and brokers reach this broker at (default: the bound --listen-addr; required when listening on every interface); with --tls-cert it is advertised as https://host:port, so that they call it with TLS (an explicit https:// or http:// prefix is kept as given)")
	fs.StringVar(&c.ExternalListenAddr, "external-listen-addr", c.ExternalListenAddr, "host:port of a second API listener for clients outside the cluster (Kafka's external listener); metadata, coordinator and not-leader answers to calls that come in on it name the brokers' --external-advertised-addr addresses. It serves the client services only (not the brokers' ReplicaService). Empty: none")
	fs.StringVar(&c.ExternalAdvertisedAddr, "external-advertised-addr", c.ExternalAdvertisedAddr, "host:port clients outside the cluster reach this broker's external listener at (a load balancer's or node port's address; default: the bound --external-listen-addr, required when it listens on every interface); with --external-tls-cert advertised as https://host:port")
	fs.StringVar(&c.KafkaAddr, "kafka-addr", c.KafkaAddr, "host:port of the Kafka wire-protocol listener: any Kafka client (Java, librdkafka/kcat, franz-go, sarama, kafka-go, kafkajs) produces, fetches and administers topics there, authenticated with SASL PLAIN (username: the tenant's name, password: an API key) or OAUTHBEARER (a Sluice token); see docs/kafka.md. Empty: none")
	fs.StringVar(&c.KafkaAdvertisedAddr, "kafka-advertised-addr", c.KafkaAdvertisedAddr, "host:port Kafka clients reach this broker's Kafka listener at, as the Metadata answers name it (default: the bound --kafka-addr; required when it listens on every interface)")
	c.TLS.RegisterFlags(fs)
	fs.IntVar(&c.KafkaMaxConnections, "kafka-max-connections", c.KafkaMaxConnections, "most open connections of the Kafka listener; one over it is closed at once (each costs about 20 KiB and two goroutines, more while a request is read)")
	c.TLS.RegisterKafkaFlags(fs)
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "folder for partition logs; the broker locks it while it runs (a second broker on it exits, naming the holder's pid)")
	fs.StringVar(&c.ControlPlane, "control-plane", c.ControlPlane, "control-plane URL")
	fs.StringVar(&c.BrokerToken, "broker-token", c.BrokerToken, "broker credential shared with the control plane and other brokers")
	fs.StringVar(&c.Rack, "rack", c.Rack, "failure domain for rack-aware placement (may be empty)")
	fs.StringVar(&c.Flush, "flush", c.Flush, "when a replica counts appended records as durable (toward the high watermark and acknowledgements): always (after an fsync, shared by the producers that arrive while one runs), interval (after the periodic fsync every --flush-interval; acknowledgements wait for it) or os (at once; the page cache is trusted, a machine crash may lose acknowledged records)")
	fs.DurationVar(&c.FlushInterval, "flush-interval", c.FlushInterval, "period of the fsync with --flush=interval: the longest an acknowledgement waits for it on each replica")
	fs.StringVar(&c.Issuer, "issuer", c.Issuer, "expected JWT issuer (iss), as the control plane's --issuer")
	fs.StringVar(&c.Audience, "audience", c.Audience, "expected JWT audience (aud), as the control plane's --audience")
	fs.DurationVar(&c.ReplicaLagTimeMax, "replica-lag-time-max", c.ReplicaLagTimeMax, "a follower not caught up for this long is removed from the ISR")
	fs.Int64Var(&c.SegmentBytes, "segment-bytes", c.SegmentBytes, "partition log segment size")
	fs.IntVar(&c.MaxOpenSegmentFiles, "max-open-segment-files", c.MaxOpenSegmentFiles, "most partition log segment files the broker keeps open (the least recently used are closed and reopened when next read or written; files in use, and with --flush=os files awaiting the fsync before their close, can exceed it for a while); 0: no limit, one open file per segment")
	fs.DurationVar(&c.SegmentAge, "segment-age", c.SegmentAge, "roll a partition's active segment once its oldest record is this old (or a tenth of the topic's retention.ms, if shorter), so retention can delete it")
	fs.DurationVar(&c.GroupSessionTimeout, "group-session-timeout", c.GroupSessionTimeout, "a consumer-group member that has not heartbeated for this long is removed and its partitions reassigned")
	fs.DurationVar(&c.GroupHeartbeatInterval, "group-heartbeat-interval", c.GroupHeartbeatInterval, "how often consumer-group members heartbeat (and learn of rebalances)")
	fs.DurationVar(&c.GroupInitialRebalanceDelay, "group-initial-rebalance-delay", c.GroupInitialRebalanceDelay, "how long the first rebalance of an empty group of Kafka's classic protocol (JoinGroup) waits for more members to join (Kafka's group.initial.rebalance.delay.ms; 0: none)")
	fs.DurationVar(&c.GroupLagMetricsInterval, "group-lag-metrics-interval", c.GroupLagMetricsInterval, "how often to compute the lag of the consumer groups this broker coordinates for sluice_group_lag_messages / sluice_group_lag_seconds (0 disables them)")
	fs.IntVar(&c.GroupLagMetricsMaxSeries, "group-lag-metrics-max-series", c.GroupLagMetricsMaxSeries, "most group lag label sets (tenant, group, topic, partition) this broker exports; over it, the groups that lag least are exported per topic (partition=\"all\"), and if even that does not fit, not at all")
	fs.DurationVar(&c.RetentionCheckInterval, "retention-check-interval", c.RetentionCheckInterval, "how often each partition deletes segments past its topic's retention.ms / retention.bytes")
	fs.DurationVar(&c.TierCopyInterval, "tier-copy-interval", c.TierCopyInterval, "with tiered storage: how often partition leaders copy closed segments below the high watermark to the object store")
	fs.StringVar(&c.TierCacheDir, "tier-cache-dir", c.TierCacheDir, "with tiered storage: folder caching chunks of remote segments for cold reads (default <data-dir>/.tier-cache; emptied at start)")
	fs.Int64Var(&c.TierCacheBytes, "tier-cache-bytes", c.TierCacheBytes, "with tiered storage: most bytes the cold-read cache holds on disk")
	fs.IntVar(&c.TierMaxConcurrentReads, "tier-max-concurrent-reads", c.TierMaxConcurrentReads, "with tiered storage: most object-store reads in flight for cold fetches")
	fs.Int64Var(&c.TierReadBytesPerSecond, "tier-read-bytes-per-second", c.TierReadBytesPerSecond, "with tiered storage: most bytes per second cold fetches read from the object store (0: no limit)")
	fs.DurationVar(&c.MaxTransactionTimeout, "max-transaction-timeout", c.MaxTransactionTimeout, "longest transaction timeout a transactional producer may ask for (InitProducerId's transaction_timeout_ms; the default is 60s): a transaction open longer is aborted by its coordinator")
	fs.DurationVar(&c.TransactionalIDExpiration, "transactional-id-expiration", c.TransactionalIDExpiration, "a transactional id with no transaction open and no call for this long is forgotten by its coordinator (its producer's next InitProducerId starts with a new producer id)")
	fs.DurationVar(&c.QuotaExchangeInterval, "quota-exchange-interval", c.QuotaExchangeInterval, "how often to report each tenant's offered and admitted rates and its holdings here (storage, groups, transactional ids) to the control plane and take this broker's new allotments of the tenants' cluster-wide quotas; a tenant new to this broker makes it exchange at once (at most every 100 ms, or a quarter of the interval when shorter) and its calls wait for the answer (up to 3 s, or until the exchange fails, then are admitted), and the allotments follow a shift of traffic between brokers within a few intervals")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest request message accepted, in bytes")
	c.RequestMemory.RegisterFlags(fs)
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long to drain in-flight requests on shutdown")
	fs.DurationVar(&c.UsageReportInterval, "usage-report-interval", c.UsageReportInterval, "how often to report the tenants' metered usage (ingress from the logs of the partitions this broker leads, egress bytes, requests) to the control plane for billing; an unanswered report is retried with the same content. A crash loses at most the egress and request counts of about one interval plus the retry time, never ingress")
}

// FlushPolicy parses Flush.
func (c *Config) FlushPolicy() (log.FlushPolicy, error) {
	switch c.Flush {
	case "always":
		return log.FlushAlways, nil
	case "interval":
		return log.FlushInterval, nil
	case "os":
		return log.FlushOS, nil
	}
	return 0, fmt.Errorf("--flush must be always, interval or os; got %q", c.Flush)
}

// Advertised is the address other parties reach this broker at:
// https://host:port when its API listener serves TLS and the address
// names no scheme itself.
func (c *Config) Advertised() string {
	a := c.AdvertisedAddr
	if a == "" {
		a = c.ListenAddr
	}
	if c.TLS.API.Cert != "" && endpoint.Scheme(a) == "" {
		return "https://" + a
	}
	return a
}

// ExternalAdvertised is the address clients outside the cluster reach
// this broker at, "" without an external listener: https://host:port when
// that listener serves TLS and the address names no scheme itself.
func (c *Config) ExternalAdvertised() string {
	if c.ExternalListenAddr == "" {
		return ""
	}
	a := c.ExternalAdvertisedAddr
	if a == "" {
		a = c.ExternalListenAddr
	}
	if c.TLS.External.Cert != "" && endpoint.Scheme(a) == "" {
		return "https://" + a
	}
	return a
}

// KafkaAdvertised is the host:port Kafka clients reach this broker at, ""
// without a Kafka listener.
func (c *Config) KafkaAdvertised() string {
	if c.KafkaAddr == "" {
		return ""
	}
	if c.KafkaAdvertisedAddr != "" {
		return c.KafkaAdvertisedAddr
	}
	return c.KafkaAddr
}

// Validate checks the config and names the first bad field.
func (c *Config) Validate() error {
	if c.ID < 0 {
		return fmt.Errorf("--id must not be negative; got %d", c.ID)
	}
	lhost, _, err := net.SplitHostPort(c.ListenAddr)
	if err != nil {
		return fmt.Errorf("--listen-addr %q: %w", c.ListenAddr, err)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr must be host:port (or empty for no operator listener); got %q", c.MetricsAddr)
		}
	}
	if c.AdvertisedAddr == "" {
		if ip := net.ParseIP(lhost); lhost == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("--advertised-addr is required when --listen-addr %q listens on every interface", c.ListenAddr)
		}
	} else if err := endpoint.Validate(c.AdvertisedAddr); err != nil {
		return fmt.Errorf("--advertised-addr must be host:port (or https://host:port) with a fixed port: %w", err)
	}
	if err := c.validateExternal(); err != nil {
		return err
	}
	if err := c.validateKafka(); err != nil {
		return err
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	if c.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	if u, err := url.Parse(c.ControlPlane); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--control-plane must be an http:// or https:// URL; got %q", c.ControlPlane)
	}
	if len(c.BrokerToken) < 16 {
		return errors.New("--broker-token is required (at least 16 characters)")
	}
	if _, err := c.FlushPolicy(); err != nil {
		return err
	}
	if c.Flush == "interval" && c.FlushInterval <= 0 {
		return fmt.Errorf("--flush-interval must be positive; got %s", c.FlushInterval)
	}
	if c.ReplicaLagTimeMax < time.Second {
		return fmt.Errorf("--replica-lag-time-max must be at least 1s; got %s", c.ReplicaLagTimeMax)
	}
	if c.MaxOpenSegmentFiles < 0 {
		return fmt.Errorf("--max-open-segment-files must not be negative; got %d", c.MaxOpenSegmentFiles)
	}
	if c.SegmentBytes < 1<<20 || c.SegmentBytes > 1<<31-1 {
		return fmt.Errorf("--segment-bytes must be between 1 MiB and 2 GiB; got %d", c.SegmentBytes)
	}
	if c.SegmentAge < time.Second {
		return fmt.Errorf("--segment-age must be at least 1s; got %s", c.SegmentAge)
	}
	if c.GroupInitialRebalanceDelay < 0 {
		return fmt.Errorf("--group-initial-rebalance-delay must not be negative; got %s", c.GroupInitialRebalanceDelay)
	}
	if c.GroupHeartbeatInterval < 100*time.Millisecond || c.GroupSessionTimeout < 2*c.GroupHeartbeatInterval {
		return fmt.Errorf("--group-heartbeat-interval must be at least 100ms and --group-session-timeout at least twice it; got %s and %s", c.GroupHeartbeatInterval, c.GroupSessionTimeout)
	}
	if c.RetentionCheckInterval < 100*time.Millisecond {
		return fmt.Errorf("--retention-check-interval must be at least 100ms; got %s", c.RetentionCheckInterval)
	}
	if c.GroupLagMetricsInterval != 0 && c.GroupLagMetricsInterval < 100*time.Millisecond {
		return fmt.Errorf("--group-lag-metrics-interval must be 0 (off) or at least 100ms; got %s", c.GroupLagMetricsInterval)
	}
	if c.GroupLagMetricsMaxSeries < 1 {
		return fmt.Errorf("--group-lag-metrics-max-series must be at least 1; got %d", c.GroupLagMetricsMaxSeries)
	}
	if c.TierCopyInterval < 100*time.Millisecond {
		return fmt.Errorf("--tier-copy-interval must be at least 100ms; got %s", c.TierCopyInterval)
	}
	if c.TierCacheBytes < 16<<20 {
		return fmt.Errorf("--tier-cache-bytes must be at least 16 MiB; got %d", c.TierCacheBytes)
	}
	if c.TierMaxConcurrentReads < 1 || c.TierReadBytesPerSecond < 0 {
		return fmt.Errorf("--tier-max-concurrent-reads must be at least 1 and --tier-read-bytes-per-second not negative; got %d and %d", c.TierMaxConcurrentReads, c.TierReadBytesPerSecond)
	}
	if c.MaxTransactionTimeout < time.Second || c.MaxTransactionTimeout > 24*time.Hour {
		return fmt.Errorf("--max-transaction-timeout must be between 1s and 24h; got %s", c.MaxTransactionTimeout)
	}
	if c.TransactionalIDExpiration < time.Minute {
		return fmt.Errorf("--transactional-id-expiration must be at least 1m; got %s", c.TransactionalIDExpiration)
	}
	if c.UsageReportInterval < 100*time.Millisecond || c.UsageReportInterval > time.Hour {
		return fmt.Errorf("--usage-report-interval must be between 100ms and 1h; got %s", c.UsageReportInterval)
	}
	if c.QuotaExchangeInterval < 100*time.Millisecond || c.QuotaExchangeInterval > time.Minute {
		return fmt.Errorf("--quota-exchange-interval must be between 100ms and 1m; got %s", c.QuotaExchangeInterval)
	}
	if c.MaxRequestBytes < 1<<10 || c.MaxRequestBytes > 256<<20 {
		return fmt.Errorf("--max-request-bytes must be between 1 KiB and 256 MiB; got %d", c.MaxRequestBytes)
	}
	if c.Issuer == "" || c.Audience == "" {
		return errors.New("--issuer and --audience must not be empty")
	}
	return c.RequestMemory.Validate()
}

// validateExternal checks the external listener's addresses.
func (c *Config) validateExternal() error {
	if c.ExternalListenAddr == "" {
		if c.ExternalAdvertisedAddr != "" || c.TLS.External != (tlsfiles.Files{}) {
			return errors.New("--external-advertised-addr and --external-tls-* need --external-listen-addr")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(c.ExternalListenAddr)
	if err != nil {
		return fmt.Errorf("--external-listen-addr %q: %w", c.ExternalListenAddr, err)
	}
	if c.ExternalAdvertisedAddr == "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("--external-advertised-addr is required when --external-listen-addr %q listens on every interface", c.ExternalListenAddr)
		}
		return nil
	}
	if err := endpoint.Validate(c.ExternalAdvertisedAddr); err != nil {
		return fmt.Errorf("--external-advertised-addr must be host:port (or https://host:port) with a fixed port: %w", err)
	}
	return nil
}

// validateKafka checks the Kafka listener's addresses.
func (c *Config) validateKafka() error {
	if c.KafkaAddr == "" {
		if c.KafkaAdvertisedAddr != "" || c.TLS.Kafka != (tlsfiles.Files{}) {
			return errors.New("--kafka-advertised-addr and --kafka-tls-* need --kafka-addr")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(c.KafkaAddr)
	if err != nil {
		return fmt.Errorf("--kafka-addr %q: %w", c.KafkaAddr, err)
	}
	if c.KafkaMaxConnections < 1 {
		return fmt.Errorf("--kafka-max-connections must be at least 1; got %d", c.KafkaMaxConnections)
	}
	if c.KafkaAdvertisedAddr == "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("--kafka-advertised-addr is required when --kafka-addr %q listens on every interface", c.KafkaAddr)
		}
		return nil
	}
	h, p, err := net.SplitHostPort(c.KafkaAdvertisedAddr)
	if err != nil || h == "" || p == "0" || p == "" {
		return fmt.Errorf("--kafka-advertised-addr must be host:port with a fixed port; got %q", c.KafkaAdvertisedAddr)
	}
	return nil
}
