package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/dirlock"
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
	srv, err := controlplane.New(ctx, cfg, controlplane.Deps{Logger: logger})
	if err != nil {
		closeListeners(ln, ops)
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
	groupHeartbeat, groupSession time.Duration
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
	cfg := controlplane.DefaultConfig()
	cfg.ListenAddr = listen
	// Each process's operator listener on a free loopback port, printed
	// below (a second dev, or a control plane on the defaults, may run).
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.DatabaseURL = "sqlite:" + filepath.Join(dataDir, "controlplane.db")
	cfg.OperatorToken = secrets.OperatorToken
	cfg.BrokerToken = secrets.BrokerToken
	cfg.DefaultReplicationFactor = 3
	// Local webhook receivers (http://localhost:…) are what dev is for.
	cfg.WebhookAllowInsecureLoopback = true
	// A local sandbox where scripts and test suites sign up tenant after
	// tenant from one address: a signup limit that still bounds a runaway
	// loop (100 at once, then 10 a second) instead of production's 5 at
	// once, then 1 per 10 minutes.
	cfg.ClientLimits.Signup = clientlimit.Limit{Burst: 100, Every: 100 * time.Millisecond}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrc := make(chan [2]string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- runControlPlane(ctx, cfg, logger, func(addr, metrics string) { addrc <- [2]string{addr, metrics} })
	}()
	var addr, cpMetrics string
	select {
	case err := <-errc:
		return err
	case a := <-addrc:
		addr, cpMetrics = a[0], a[1]
	}
	endpoint := "http://" + addr
	if err := a.devTenant(ctx, dataDir, endpoint, &secrets); err != nil {
		cancel()
		<-errc
		return err
	}
	// Tiered storage in a folder the three brokers share, as they would
	// share a bucket.
	objects, err := folder.New(filepath.Join(dataDir, "objects"))
	if err != nil {
		cancel()
		<-errc
		return fmt.Errorf("tiered storage: %w", err)
	}
	// Three brokers in this process, each with its own folder; they join
	// the control plane like separate processes would.
	brokerAddrs := make([]string, devBrokers)
	brokerMetrics := make([]string, devBrokers)
	brokerErr := make(chan error, devBrokers)
	for i := range devBrokers {
		bc := broker.DefaultConfig()
		bc.ID = int32(i + 1)
		bc.ListenAddr = "127.0.0.1:0"
		bc.MetricsAddr = "127.0.0.1:0"
		bc.DataDir = filepath.Join(dataDir, fmt.Sprintf("broker-%d", i+1))
		bc.ControlPlane = endpoint
		bc.BrokerToken = secrets.BrokerToken
		bc.Rack = fmt.Sprintf("rack-%d", i+1)
		bc.GroupHeartbeatInterval, bc.GroupSessionTimeout = opts.groupHeartbeat, opts.groupSession
		ready := make(chan [2]string, 1)
		go func() {
			brokerErr <- runBroker(ctx, bc, logger, objects, func(addr, metrics string) { ready <- [2]string{addr, metrics} })
		}()
		select {
		case a := <-ready:
			brokerAddrs[i], brokerMetrics[i] = a[0], a[1]
		case err := <-brokerErr:
			cancel()
			<-errc
			return fmt.Errorf("start broker %d: %w", i+1, err)
		}
	}
	if err := waitBrokers(ctx, endpoint, secrets.OperatorToken, devBrokers); err != nil {
		cancel()
		<-errc
		return err
	}
	// Each process's operator listener; never on the endpoint, which
	// tenants reach.
	metrics := fmt.Sprintf("http://%s/metrics (control plane)", cpMetrics)
	for i, m := range brokerMetrics {
		metrics += fmt.Sprintf("\n                 http://%s/metrics (broker %d)", m, i+1)
	}
	fmt.Fprintf(a.stdout, `Sluice dev is running.

  endpoint       %s
  data dir       %s
  tenant id      %s
  api key        %s
  profile        "dev" in %s
  JWKS           %s/.well-known/jwks.json
  brokers        %s
  metrics        %s
                 (operator listeners, loopback only: their labels name every tenant)

Try:  sluice --profile dev tenant get
      sluice --profile dev topic create orders --partitions 3
      sluice --profile dev topic describe orders
Stop with Ctrl-C; state stays in %s.
`, endpoint, dataDir, secrets.TenantID, secrets.APIKey, a.configPath, endpoint, strings.Join(brokerAddrs, " "), metrics, dataDir)
	err = <-errc
	cancel()
	for range devBrokers {
		if berr := <-brokerErr; berr != nil && err == nil {
			err = berr
		}
	}
	return err
}

// devTenant signs up the "dev" tenant through the API on first start,
// remembers its key in the data dir, and saves CLI profiles for it.
func (a *app) devTenant(ctx context.Context, dataDir, endpoint string, s *devSecrets) error {
	if s.APIKey == "" {
		hc, err := httpClient(endpoint)
		if err != nil {
			return err
		}
		c := newClients(hc, endpoint, "")
		res, err := c.tenant.Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: "dev@sluice.local", TenantName: "dev"}))
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
	p := Profile{Endpoint: endpoint, APIKey: s.APIKey, TenantID: s.TenantID}
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
	opts := devOptions{groupHeartbeat: time.Second, groupSession: 10 * time.Second}
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

The control plane and each broker serve Prometheus metrics, /healthz,
/readyz and Go profiles (/debug/pprof/) on their own operator listener, on a
free loopback port printed at start; the endpoint serves neither metrics
(their labels name every tenant) nor profiles.`,
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
	cmd.Flags().DurationVar(&opts.groupHeartbeat, "group-heartbeat-interval", opts.groupHeartbeat, "how often consumer-group members heartbeat (and learn of rebalances)")
	cmd.Flags().DurationVar(&opts.groupSession, "group-session-timeout", opts.groupSession, "a consumer-group member silent this long is removed and its partitions reassigned")
	return cmd
}

// devBrokers is how many brokers `sluice dev` runs.
const devBrokers = 3

// waitBrokers waits until n brokers have registered and are live.
func waitBrokers(ctx context.Context, endpoint, operatorToken string, n int) error {
	hc, err := httpClient(endpoint)
	if err != nil {
		return err
	}
	op := sluicev1connect.NewOperatorServiceClient(hc, endpoint, connect.WithInterceptors(tenants.Bearer(operatorToken)))
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := op.ListBrokers(ctx, connect.NewRequest(&sluicev1.ListBrokersRequest{}))
		if err == nil {
			live := 0
			for _, b := range res.Msg.GetBrokers() {
				if b.GetLive() {
					live++
				}
			}
			if live >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("brokers did not join the control plane within 30s (last error: %v)", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

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
