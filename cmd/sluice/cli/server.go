package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/dirlock"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/localcluster/brokernode"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tiered/objstore/folder"

	"github.com/sluicemq/sluice/dataplane/broker"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/clientlimit"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func (a *app) controlplaneCommand() *cobra.Command {
	cfg := controlplane.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Run a control-plane replica (tenants, auth, topics, placement) on Postgres or SQLite",
		Example: `  sluice controlplane --database-url postgres://sluice@db/sluice --operator-token "$OP" --broker-token "$BT"
  SLUICE_DATABASE_URL=sqlite:./cp.db sluice controlplane`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			logger, err := a.logger()
			if err != nil {
				return err
			}
			return runControlPlane(cmd.Context(), cfg, logger, nil)
		},
	}
	cfg.RegisterFlags(cmd.Flags())
	return cmd
}

// runControlPlane serves until ctx is cancelled. ready, when not nil, is
// called with the bound addresses (the API's, the operator listener's or
// "" without one) once the server accepts connections.
func runControlPlane(ctx context.Context, cfg controlplane.Config, logger *slog.Logger, ready func(addr, metricsAddr string)) error {
	// Bind first: a busy port is reported before the store is touched.
	ln, ops, err := listen(cfg.ListenAddr, cfg.MetricsAddr)
	if err != nil {
		return err
	}
	xln, err := listenExternal(cfg.ExternalListenAddr)
	if err != nil {
		closeListeners(ln, ops)
		return err
	}
	srv, err := controlplane.New(ctx, cfg, controlplane.Deps{Logger: logger, External: xln})
	if err != nil {
		closeListeners(ln, ops, xln)
		return err
	}
	defer srv.Close()
	if ready != nil {
		ready(ln.Addr().String(), addrOf(ops))
	}
	return srv.Run(ctx, ln, ops)
}

// listen binds a server's tenant-facing address and, unless metricsAddr
// is empty (ops is nil then), its operator listener.
func listen(addr, metricsAddr string) (ln, ops net.Listener, err error) {
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if metricsAddr == "" {
		return ln, nil, nil
	}
	ops, err = net.Listen("tcp", metricsAddr)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("listen on --metrics-addr %s: %w", metricsAddr, err)
	}
	return ln, ops, nil
}

// listenExternal binds a server's external listener; nil without one.
func listenExternal(addr string) (net.Listener, error) {
	return listenOn("--external-listen-addr", addr)
}

// listenOn binds the optional listener of flag at addr; nil when addr is
// empty.
func listenOn(flag, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s: %w", flag, addr, err)
	}
	return ln, nil
}

func closeListeners(ls ...net.Listener) {
	for _, l := range ls {
		if l != nil {
			l.Close()
		}
	}
}

// addrOf is a listener's address, or "" for none.
func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// devOptions are sluice dev's tunables beyond the data dir and address.
type devOptions struct {
	// tls serves TLS on the API listeners, from a throwaway CA in the
	// data dir, with mutual TLS between the servers.
	tls                          bool
	kafkaAddr                    string // the first broker's Kafka listener; "" none
	groupHeartbeat, groupSession time.Duration
	usageReportInterval          time.Duration
	quotaExchangeInterval        time.Duration
	billingInterval              time.Duration
}

func (a *app) runDev(ctx context.Context, dataDir, listen string, opts devOptions, logger *slog.Logger) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	// It holds secrets and the signing keys: keep it private.
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return fmt.Errorf("secure data dir: %w", err)
	}
	// One dev per data dir: a second would run brokers on the same logs
	// and SQLite file and repoint the dev profile. Each broker also locks
	// its own folder.
	lock, err := dirlock.Acquire(dataDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	secrets, err := loadDevSecrets(dataDir)
	if err != nil {
		return err
	}
	cfgCP := func(cfg *controlplane.Config) {
		// Local webhook receivers (http://localhost:…) are what dev is for.
		cfg.WebhookAllowInsecureLoopback = true
		// A local sandbox where scripts and test suites sign up tenant after
		// tenant from one address: a signup limit that still bounds a runaway
		// loop (100 at once, then 10 a second) instead of production's 5 at
		// once, then 1 per 10 minutes.
		cfg.ClientLimits.Signup = clientlimit.Limit{Burst: 100, Every: 100 * time.Millisecond}
		cfg.BillingInterval = opts.billingInterval
	}

	// Start-up detail (migrations, listeners, registrations, the offsets
	// topic's partitions) is logged at debug until the summary is printed:
	// the summary says it all, and is the last thing a user sees.
	quiet := &atomic.Bool{}
	quiet.Store(true)
	logger = slog.New(startupHandler{h: logger.Handler(), quiet: quiet})

	// Tiered storage in a folder the three brokers share, as they would
	// share a bucket.
	objects, err := folder.New(filepath.Join(dataDir, "objects"))
	if err != nil {
		return fmt.Errorf("tiered storage: %w", err)
	}
	// The control plane on SQLite in the data dir and, below, three
	// brokers in this process, each with its own folder and rack; they
	// join the control plane like separate processes would. Each
	// process's operator listener is on a free loopback port, printed
	// below (a second dev, or a control plane on the defaults, may run).
	cpStart := time.Now()
	cluster, err := localcluster.New(ctx, localcluster.Options{
		DataDir: dataDir, Brokers: devBrokers, ListenAddr: listen, MetricsAddr: "127.0.0.1:0", BrokerMetrics: true,
		BrokerToken: secrets.BrokerToken, OperatorToken: secrets.OperatorToken, ControlPlane: cfgCP, Logger: logger, TLS: opts.tls, KafkaAddr: opts.kafkaAddr,
		NewBroker: brokernode.New(brokernode.Options{Logger: logger, TierStore: objects, Config: func(bc *broker.Config) {
			bc.GroupHeartbeatInterval, bc.GroupSessionTimeout = opts.groupHeartbeat, opts.groupSession
			bc.UsageReportInterval = opts.usageReportInterval
			bc.QuotaExchangeInterval = opts.quotaExchangeInterval
		}}),
	})
	if err != nil {
		return err
	}
	// failed ends a start-up that did not finish: interrupted, it is a
	// clean stop (exit 0); otherwise err says why. The brokers stop
	// before the control plane (so that they do not warn about a control
	// plane going away).
	failed := func(err error) error {
		serr := cluster.Close()
		if ctx.Err() != nil {
			return serr
		}
		return err
	}
	endpoint := cluster.Endpoint
	restart := secrets.APIKey != "" // brokers ran on this data dir before
	if err := a.devTenant(ctx, dataDir, endpoint, cluster.CAFile, &secrets); err != nil {
		return failed(err)
	}
	if err := cluster.StartBrokers(ctx); err != nil {
		return failed(err)
	}
	var brokers []devBroker
	for _, b := range cluster.Brokers() {
		addr := b.Addr
		if opts.tls {
			addr = "https://" + addr // as the broker advertises it
		}
		brokers = append(brokers, devBroker{ID: b.ID, Address: addr, KafkaAddress: b.KafkaAddr, MetricsURL: "http://" + b.MetricsAddr + "/metrics"})
	}
	if err := cluster.WaitBrokers(ctx, 30*time.Second); err != nil {
		return failed(err)
	}
	// Consumer groups and transactions work once the control plane has
	// created the internal offsets and transaction-state topics and every
	// broker knows them: wait for that too, so that the summary comes
	// after their start-up and both work at once.
	if err := waitGroups(ctx, endpoint, cluster.CAFile, secrets.APIKey, brokers); err != nil {
		if ctx.Err() != nil {
			return failed(err)
		}
		logger.Warn("consumer groups or transactions are not available yet", "err", err)
	}
	sum := devSummary{
		Endpoint: endpoint, DataDir: dataDir, TenantID: secrets.TenantID, APIKey: secrets.APIKey,
		Profile: "dev", CLIConfig: a.configPath, JWKSURL: endpoint + "/.well-known/jwks.json",
		ControlPlaneMetricsURL: "http://" + cluster.MetricsAddr + "/metrics", Brokers: brokers,
	}
	if err := a.printDevSummary(sum); err != nil {
		return failed(err)
	}
	// After a restart the brokers rejoin the ISRs once the controller's
	// start-up grace is over (they count as restarted), which logs a few
	// lines per partition: that too is start-up, kept at debug until every
	// partition is in sync again.
	settleAfter := cpStart
	if restart {
		settleAfter = cpStart.Add(controlplane.DefaultConfig().Controller.StartupGrace)
	}
	settleCtx, stopSettle := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSettle()
	go func() {
		settle(settleCtx, sum.ControlPlaneMetricsURL, settleAfter)
		quiet.Store(false)
	}()

	// Run until ctx ends (Ctrl-C, SIGTERM) or a process fails.
	select {
	case <-ctx.Done():
	case <-cluster.Failed(): // Close returns its error
	}
	stopSettle()
	if err := cluster.Close(); err != nil {
		return err
	}

	if ctx.Err() != nil && a.output != "json" {
		fmt.Fprintf(a.stdout, "Sluice dev stopped; state stays in %s.\n", dataDir)
	}
	return nil
}

// devBroker is one of sluice dev's brokers, as its summary shows it.
type devBroker struct {
	ID      int32  `json:"id"`
	Address string `json:"address"`
	// KafkaAddress is its Kafka listener's, "" without one.
	KafkaAddress string `json:"kafkaAddress,omitempty"`
	MetricsURL   string `json:"metricsUrl"`
}

// devSummary is what sluice dev prints once it is ready (with -o json as
// one JSON object, in the CLI's camelCase).
type devSummary struct {
	Endpoint               string      `json:"endpoint"`
	DataDir                string      `json:"dataDir"`
	TenantID               string      `json:"tenantId"`
	APIKey                 string      `json:"apiKey"`
	Profile                string      `json:"profile"`
	CLIConfig              string      `json:"cliConfig"`
	JWKSURL                string      `json:"jwksUrl"`
	ControlPlaneMetricsURL string      `json:"controlPlaneMetricsUrl"`
	Brokers                []devBroker `json:"brokers"`
}

// printDevSummary writes the block a user of sluice dev sees last: where
// everything listens and what to type next.
func (a *app) printDevSummary(s devSummary) error {
	if a.output == "json" {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.stdout, string(b))
		return err
	}
	addrs := make([]string, len(s.Brokers))
	var kafkaAddrs []string
	metrics := fmt.Sprintf("%s (control plane)", s.ControlPlaneMetricsURL)
	for i, b := range s.Brokers {
		addrs[i] = b.Address
		if b.KafkaAddress != "" {
			kafkaAddrs = append(kafkaAddrs, b.KafkaAddress)
		}
		metrics += fmt.Sprintf("\n                 %s (broker %d)", b.MetricsURL, b.ID)
	}
	kafka := ""
	if len(kafkaAddrs) > 0 {
		// A ready client config: Java, librdkafka (kcat -F) and most
		// others take these properties as they are.
		kafka = fmt.Sprintf(`  kafka          %s
                 bootstrap.servers=%s
                 security.protocol=SASL_PLAINTEXT
                 sasl.mechanism=PLAIN
                 sasl.username=%s
                 sasl.password=%s
`, strings.Join(kafkaAddrs, ","), strings.Join(kafkaAddrs, ","), devTenantName, s.APIKey)
	}
	_, err := fmt.Fprintf(a.stdout, `Sluice dev is running.

  endpoint       %s
  profile        %q in %s
  tenant id      %s
  api key        %s
  JWKS           %s
  brokers        %s
%s  metrics        %s
                 (loopback only: their labels name every tenant)

Try: sluice --profile dev topic create orders --partitions 3
     sluice --profile dev produce orders --value hello
     sluice --profile dev consume orders
Stop with Ctrl-C; state stays in %s.
`, s.Endpoint, s.Profile, s.CLIConfig, s.TenantID, s.APIKey, s.JWKSURL, strings.Join(addrs, " "), kafka, metrics, s.DataDir)
	return err
}

// startupHandler passes log records on, except that while quiet is set it
// keeps info records to a logger at debug level: the start-up detail that
// sluice dev's summary replaces (--log-level debug shows it, as logged).
type startupHandler struct {
	h     slog.Handler
	quiet *atomic.Bool
}

func (s startupHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo && s.quiet.Load() {
		return s.h.Enabled(ctx, slog.LevelDebug)
	}
	return s.h.Enabled(ctx, l)
}

func (s startupHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && s.quiet.Load() && !s.h.Enabled(ctx, slog.LevelDebug) {
		return nil // quieted after Enabled said yes
	}
	return s.h.Handle(ctx, r)
}

func (s startupHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return startupHandler{h: s.h.WithAttrs(as), quiet: s.quiet}
}

func (s startupHandler) WithGroup(name string) slog.Handler {
	return startupHandler{h: s.h.WithGroup(name), quiet: s.quiet}
}

// settle returns once the controller has acted on the brokers' start-up
// (not before after: on a restart, when its start-up grace ends) and, as
// its metrics at metricsURL say, no partition
// is offline or under-replicated; after a minute at most, or when ctx ends.
func settle(ctx context.Context, metricsURL string, after time.Time) {
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		if time.Now().After(after) {
			if v, err := scrapeGauges(ctx, hc, metricsURL, "sluice_controlplane_controller_active",
				"sluice_controlplane_offline_partitions", "sluice_controlplane_under_replicated_partitions"); err == nil &&
				v[0] == 1 && v[1] == 0 && v[2] == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scrapeGauges reads the values of unlabelled metrics from a Prometheus
// text page.
func scrapeGauges(ctx context.Context, hc *http.Client, url string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	vals := make([]float64, len(names))
	for i, name := range names {
		found := false
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				if vals[i], err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no metric %s at %s", name, url)
		}
	}
	return vals, nil
}

// waitGroups waits until each broker answers a consumer-group call and a
// transaction call for the dev tenant, that is until the internal offsets
// and transaction-state topics exist, are led, and every broker knows
// them, for up to 30 s.
func waitGroups(ctx context.Context, cpURL, caFile, apiKey string, brokers []devBroker) error {
	hc, err := httpClient(cpURL, caFile)
	if err != nil {
		return err
	}
	tok, err := newClients(hc, cpURL, "").auth.CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: apiKey}))
	if err != nil {
		return fmt.Errorf("log in as the dev tenant: %w", err)
	}
	bearer := connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken()))
	deadline := time.Now().Add(30 * time.Second)
	for _, b := range brokers {
		gs := sluicev1connect.NewGroupServiceClient(hc, endpoint.URL(b.Address, "http"), bearer)
		ts := sluicev1connect.NewTransactionServiceClient(hc, endpoint.URL(b.Address, "http"), bearer)
		for {
			_, err := gs.ListGroups(ctx, connect.NewRequest(&sluicev1.ListGroupsRequest{}))
			if err == nil {
				_, err = ts.ListTransactions(ctx, connect.NewRequest(&sluicev1.ListTransactionsRequest{}))
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("broker %d: %w", b.ID, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// devTenant signs up the "dev" tenant through the API on first start,
// remembers its key in the data dir, and saves CLI profiles for it.
func (a *app) devTenant(ctx context.Context, dataDir, endpoint, caFile string, s *devSecrets) error {
	if s.APIKey == "" {
		hc, err := httpClient(endpoint, caFile)
		if err != nil {
			return err
		}
		c := newClients(hc, endpoint, "")
		res, err := c.tenant.Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: "dev@sluice.local", TenantName: devTenantName}))
		if connect.CodeOf(err) == connect.CodeAlreadyExists {
			return fmt.Errorf("create dev tenant: %w (the dev tenant exists but %s lost its key: start over with an empty --data-dir)", err, filepath.Join(dataDir, "secrets.json"))
		}
		if err != nil {
			return fmt.Errorf("create dev tenant: %w", err)
		}
		s.APIKey, s.TenantID = res.Msg.GetApiKeySecret(), res.Msg.GetTenant().GetId()
		if err := writeJSON0600(filepath.Join(dataDir, "secrets.json"), s); err != nil {
			return err
		}
	}
	p := Profile{Endpoint: endpoint, APIKey: s.APIKey, TenantID: s.TenantID, CAFile: caFile}
	if err := saveProfile(a.configPath, "dev", p); err != nil {
		return err
	}
	c, err := readConfig(a.configPath)
	if err != nil {
		return err
	}
	if _, ok := c.Profiles["default"]; !ok {
		return saveProfile(a.configPath, "default", p)
	}
	return nil
}

func (a *app) devCommand() *cobra.Command {
	var dataDir, listen string
	opts := devOptions{groupHeartbeat: time.Second, groupSession: 10 * time.Second, usageReportInterval: broker.DefaultConfig().UsageReportInterval,
		quotaExchangeInterval: broker.DefaultConfig().QuotaExchangeInterval, billingInterval: controlplane.DefaultConfig().BillingInterval}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Sluice locally in one process, with its data in one folder",
		Long: `dev runs the control plane on an embedded SQLite database in --data-dir and
three brokers in the same process (each with its own folder under --data-dir),
creates a "dev" tenant on first start, and saves a ready CLI profile named
"dev" (and "default" when you have none). Nothing to install. Replicated
topics (replication factor 3) work as on a real cluster.

One dev runs per --data-dir: a second one on the same folder (on another
port too) exits at once with an error naming the running one's pid. The lock
goes with the process, so after a crash or kill -9 dev starts again as usual.

Each broker also serves the Kafka protocol (--kafka-addr, 127.0.0.1:9092
to 9094 by default): any Kafka client connects with SASL PLAIN, username
"dev" and the dev API key as password; the summary prints a ready client
config.

The control plane and each broker serve Prometheus metrics, /healthz,
/readyz and Go profiles (/debug/pprof/) on their own operator listener, on a
free loopback port printed at start; the endpoint serves neither metrics
(their labels name every tenant) nor profiles.

Once it is ready (brokers joined, consumer groups and transactions available) it prints a
summary, the last thing you see: the endpoint, the profile, the brokers'
addresses and every metrics endpoint (with -o json: one JSON object). Start-up
detail is logged at debug, as is, after a restart, the brokers' rejoining
of the ISRs (until every partition is in sync again); --log-level debug
shows it. Ctrl-C or SIGTERM stops the brokers, then the control plane, and
exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := a.logger()
			if err != nil {
				return err
			}
			return a.runDev(cmd.Context(), dataDir, listen, opts, logger)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", ".sluice", "folder holding all dev state (SQLite database, secrets, partition logs); one dev at a time uses it")
	cmd.Flags().StringVar(&listen, "listen-addr", "127.0.0.1:8080", "host:port of the control-plane API")
	cmd.Flags().StringVar(&opts.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "host:port of the first broker's Kafka listener; the second and third listen on the next two ports (port 0: each on a free port); empty: no Kafka listeners. Kafka clients connect with SASL PLAIN, username dev and the printed API key as password (see docs/kafka.md)")
	cmd.Flags().BoolVar(&opts.tls, "tls", false, "serve TLS on the control plane's and the brokers' API listeners, with certificates (for 127.0.0.1, ::1 and localhost) from a throwaway CA made at each start in <data-dir>/tls (its key is never written), and mutual TLS between the servers; the endpoint becomes https:// and the saved profiles trust the CA (ca_file). The operator listeners stay plaintext on loopback")
	cmd.Flags().DurationVar(&opts.groupHeartbeat, "group-heartbeat-interval", opts.groupHeartbeat, "how often consumer-group members heartbeat (and learn of rebalances)")
	cmd.Flags().DurationVar(&opts.groupSession, "group-session-timeout", opts.groupSession, "a consumer-group member silent this long is removed and its partitions reassigned")
	cmd.Flags().DurationVar(&opts.usageReportInterval, "usage-report-interval", opts.usageReportInterval, "how often each broker reports its tenants' metered usage to the control plane (as the broker's --usage-report-interval)")
	cmd.Flags().DurationVar(&opts.billingInterval, "billing-interval", opts.billingInterval, "how often the control plane's billing job recomputes this month's draft invoices from usage and finalizes closed months' (as the control plane's --billing-interval; 0 turns billing off)")
	cmd.Flags().DurationVar(&opts.quotaExchangeInterval, "quota-exchange-interval", opts.quotaExchangeInterval, "how often each broker exchanges quotas with the control plane: reports its tenants' traffic and holdings, takes its allotments of their limits (as the broker's --quota-exchange-interval)")
	return cmd
}

// devBrokers is how many brokers `sluice dev` runs.
const devBrokers = 3

// devTenantName is the tenant dev creates (a Kafka client's SASL PLAIN
// username).
const devTenantName = "dev"

// devSecrets are generated once per data dir.
type devSecrets struct {
	OperatorToken string `json:"operator_token"`
	BrokerToken   string `json:"broker_token"`
	APIKey        string `json:"api_key,omitempty"`
	TenantID      string `json:"tenant_id,omitempty"`
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON0600(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

func loadDevSecrets(dir string) (devSecrets, error) {
	path := filepath.Join(dir, "secrets.json")
	var s devSecrets
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s = devSecrets{OperatorToken: randomToken(), BrokerToken: randomToken()}
		return s, writeJSON0600(path, s)
	case err != nil:
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("parse %s: %w", path, err)
	}
	return s, nil
}
