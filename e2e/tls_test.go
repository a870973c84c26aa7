package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
)

// TestTLSCluster runs the whole cluster (the control plane on Postgres,
// three brokers) with TLS on every listener and mutual TLS between the
// processes, and uses it as its users would: the SDK, the CLI, grpcurl
// and curl, each trusting the cluster's CA. A client that does not trust
// it, and a cleartext one, are refused with an error that says why; a
// server of the cluster with another one's certificate cannot act as that
// one. Then every process's certificate is replaced on disk under a
// producer: new connections get the new certificates, the producer's
// connections keep working, and nothing acknowledged is lost.
func TestTLSCluster(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t), TLS: true})
	tc := c.NewClient(t, "tls", "orders", 3, 2)
	cp := strings.TrimPrefix(c.ControlPlane(), "https://")
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(c.CA.CertPEM()))
	trust := &tls.Config{RootCAs: pool}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	// The SDK, trusting the CA: every broker is advertised, and reached,
	// at an https:// address.
	cl, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey), client.WithTLS(trust))
	require.NoError(t, err)
	defer cl.Close()
	md, err := sluicev1connect.NewRecordServiceClient(c.HTTPClient(), c.ControlPlane(), connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(tc.Token()))).
		GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{}))
	require.NoError(t, err)
	require.Len(t, md.Msg.GetBrokers(), 3)
	for _, b := range md.Msg.GetBrokers() {
		require.Equal(t, "https://"+c.Broker(b.GetId()).ListenAddr, b.GetAddress())
	}

	// Refused: a client that does not trust the CA, and a cleartext one.
	_, err = client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey))
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	_, err = client.New(ctx, "http://"+cp, client.APIKey(tc.APIKey))
	require.ErrorContains(t, err, "INADEQUATE_SECURITY")

	// A producer at work while every certificate is replaced.
	p, err := cl.NewProducer(ctx)
	require.NoError(t, err)
	defer p.Close(context.Background())
	listeners := map[string]string{"control plane": cp, "control plane operator listener": c.ControlPlaneMetricsAddr()}
	for _, id := range c.BrokerIDs() {
		listeners[fmt.Sprintf("broker %d", id)] = c.Broker(id).ListenAddr
		listeners[fmt.Sprintf("broker %d operator listener", id)] = c.Broker(id).MetricsAddr
	}
	before := map[string]string{}
	for name, addr := range listeners {
		before[name], err = servedSerial(addr, trust)
		require.NoError(t, err, name)
	}
	rotated := make(chan error, 1)
	go func() {
		// Once the producer is under way: the new files replace the old
		// ones in place (a rename each, as a Kubernetes secret's update).
		err := waitUntil(ctx, func() bool {
			hw := int64(0)
			for part := range int32(3) {
				_, h, err := cl.Watermarks(ctx, "orders", part)
				if err != nil {
					return false
				}
				hw += h
			}
			return hw >= 200
		})
		if err == nil {
			c.IssueServer("controlplane", tlsfiles.ControlPlaneURI)
			for _, id := range c.BrokerIDs() {
				c.IssueServer(fmt.Sprintf("broker-%d", id), tlsfiles.BrokerURI(id))
			}
		}
		rotated <- err
	}()
	run := produceSteadily(t, p, "orders", 2000, 400)
	require.NoError(t, <-rotated, "the producer did not get under way")
	require.Empty(t, run.failed, "records failed across the rotation")
	testenv.Wait(t, 30*time.Second, "every listener serves its new certificate", func() error {
		for name, addr := range listeners {
			s, err := servedSerial(addr, trust)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if s == before[name] {
				return fmt.Errorf("%s still serves certificate %s", name, s)
			}
		}
		return nil
	})
	read := readBack(t, cl, "orders")
	v := judge(run, read)
	require.Zero(t, v.lost, "acknowledged records lost")
	require.Zero(t, v.reordered)
	// The producer's connections, made before the rotation, still work.
	run2 := produceSteadily(t, p, "orders", 100, 1000)
	require.Empty(t, run2.failed)
	require.Len(t, run2.acked, 100)

	t.Run("cli", func(t *testing.T) { tlsCLI(t, c, tc) })
	t.Run("grpcurl and curl", func(t *testing.T) { tlsTools(t, c, tc) })
	t.Run("server identities", func(t *testing.T) { tlsIdentities(t, c, tc) })
}

// servedSerial is the serial number of the certificate a new TLS
// connection to addr gets.
func servedSerial(addr string, trust *tls.Config) (string, error) {
	d := &tls.Dialer{Config: trust.Clone()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// waitUntil polls cond every 20 ms until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// tlsCLI: the CLI with --ca-file, saved in the profile by login; without
// it, or with an http:// endpoint, it says what is wrong.
func tlsCLI(t *testing.T, c *testcluster.Cluster, tc *testcluster.Client) {
	cfg := filepath.Join(t.TempDir(), "cli.json")
	mustCLI(t, cfg, "--endpoint", c.ControlPlane(), "--ca-file", c.CAFile, "login", "--api-key", tc.APIKey)
	b, err := os.ReadFile(cfg)
	require.NoError(t, err)
	require.Contains(t, string(b), `"ca_file": "`+c.CAFile+`"`)
	mustCLI(t, cfg, "produce", "orders", "--key", "k", "--value", "from-the-cli")
	require.Contains(t, mustCLI(t, cfg, "consume", "orders"), "from-the-cli\n")

	// The container probe, on an operator listener that serves TLS.
	mustCLI(t, cfg, "healthcheck", "--metrics-addr", c.ControlPlaneMetricsAddr(), "--metrics-tls-cert", "set")
	mustCLI(t, cfg, "healthcheck", "https://"+c.Broker(1).MetricsAddr+"/readyz")

	other := filepath.Join(t.TempDir(), "other.json")
	_, errOut, code := cli(t, other, "--endpoint", c.ControlPlane(), "--api-key", tc.APIKey, "topic", "list")
	require.NotZero(t, code)
	require.Contains(t, errOut, "certificate signed by unknown authority")
	_, errOut, code = cli(t, other, "--endpoint", "http://"+strings.TrimPrefix(c.ControlPlane(), "https://"), "--api-key", tc.APIKey, "topic", "list")
	require.NotZero(t, code)
	require.Contains(t, errOut, "the server serves TLS: use an https:// endpoint")
}

// tlsTools: grpcurl and curl with -cacert / --cacert, as docs/api.md
// shows them; cleartext, each is told the listener serves TLS.
func tlsTools(t *testing.T, c *testcluster.Cluster, tc *testcluster.Client) {
	grpcurl := testenv.Grpcurl(t)
	curl := testenv.DebianTool(t, "curl", "curl")
	cp := strings.TrimPrefix(c.ControlPlane(), "https://")
	broker := c.Broker(c.BrokerIDs()[0]).ListenAddr

	for _, addr := range []string{cp, broker} {
		r := runGrpcurl(t, grpcurl, "-cacert", c.CAFile, addr, "grpc.health.v1.Health/Check")
		require.Zero(t, r.code, "%s%s", r.stdout, r.stderr)
		require.JSONEq(t, `{"status": "SERVING"}`, r.stdout)
	}
	r := runGrpcurl(t, grpcurl, "-cacert", c.CAFile, "-H", "authorization: Bearer "+tc.Token(),
		"-d", `{"topics": ["orders"]}`, cp, "sluice.v1.RecordService/GetMetadata")
	require.Zero(t, r.code, "%s%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `"address": "https://`+broker+`"`)
	r = runGrpcurl(t, grpcurl, "-cacert", c.CAFile, broker, "list")
	require.Zero(t, r.code, "%s%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "sluice.v1.RecordService\n")
	r = runGrpcurl(t, grpcurl, cp, "list")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "certificate signed by unknown authority")
	r = runGrpcurl(t, grpcurl, "-plaintext", cp, "list")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, tlsfiles.PlaintextMessage)

	curlOut := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, append([]string{"-sS"}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := curlOut("--cacert", c.CAFile, "-H", "Content-Type: application/json",
		"-d", `{"api_key": "`+tc.APIKey+`"}`, c.ControlPlane()+"/sluice.v1.AuthService/CreateToken")
	require.NoError(t, err, out)
	var tok struct {
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &tok), out)
	require.NotEmpty(t, tok.Token)
	out, err = curlOut("--cacert", c.CAFile, "https://"+c.Broker(c.BrokerIDs()[0]).MetricsAddr+"/metrics")
	require.NoError(t, err, out)
	require.Contains(t, out, "sluice_broker_")
	out, err = curlOut(c.ControlPlane() + "/healthz")
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "curl trusted a certificate of an unknown CA: %s", out)
	out, err = curlOut("http://" + cp + "/healthz")
	require.NoError(t, err, out)
	require.Contains(t, out, "Client sent an HTTP request to an HTTPS server")
}

// tlsIdentities: with mutual TLS inside the cluster, the broker
// credential alone no longer passes, and a certificate acts only as the
// server it names.
func tlsIdentities(t *testing.T, c *testcluster.Cluster, tc *testcluster.Client) {
	ctx := t.Context()
	leaf := func(name, identity string) tlsfiles.Files {
		f, err := c.CA.IssueFiles(t.TempDir(), name, tlsfiles.Leaf{CommonName: name, URIs: []string{identity}, Client: true, ValidFor: time.Hour})
		require.NoError(t, err)
		return f
	}
	asBroker1, token := c.AsServer(leaf("broker-1", tlsfiles.BrokerURI(1)))
	asCP, _ := c.AsServer(leaf("controlplane", tlsfiles.ControlPlaneURI))
	anonymous, _ := c.AsServer(tlsfiles.Files{})

	bs1 := sluicev1connect.NewBrokerServiceClient(asBroker1, c.ControlPlane(), connect.WithGRPC(), token)
	_, err := bs1.ListRevokedAPIKeys(ctx, connect.NewRequest(&sluicev1.ListRevokedAPIKeysRequest{}))
	require.NoError(t, err, "broker 1's certificate with the broker credential")
	_, err = bs1.HeartbeatBroker(ctx, connect.NewRequest(&sluicev1.HeartbeatBrokerRequest{BrokerId: 2}))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "broker 1's certificate heartbeating as broker 2: %v", err)
	require.ErrorContains(t, err, "TLS certificate")
	_, err = bs1.RegisterBroker(ctx, connect.NewRequest(&sluicev1.RegisterBrokerRequest{BrokerId: 3, Address: "https://127.0.0.1:1"}))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "broker 1's certificate registering broker 3: %v", err)
	for name, hc := range map[string]*http.Client{"no certificate": anonymous, "the control plane's certificate": asCP} {
		_, err := sluicev1connect.NewBrokerServiceClient(hc, c.ControlPlane(), connect.WithGRPC(), token).
			ListRevokedAPIKeys(ctx, connect.NewRequest(&sluicev1.ListRevokedAPIKeysRequest{}))
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%s: %v", name, err)
	}

	// On a broker: the control plane's and brokers' certificates pass, a
	// follower fetches only as itself.
	b3 := c.URL(c.Broker(3).ListenAddr)
	_, err = sluicev1connect.NewReplicaServiceClient(asCP, b3, connect.WithGRPC(), token).
		ListAllTransactions(ctx, connect.NewRequest(&sluicev1.ListAllTransactionsRequest{}))
	require.NoError(t, err, "the control plane's certificate at a broker")
	_, err = sluicev1connect.NewReplicaServiceClient(anonymous, b3, connect.WithGRPC(), token).
		ListAllTransactions(ctx, connect.NewRequest(&sluicev1.ListAllTransactionsRequest{}))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "no certificate at a broker: %v", err)
	_, err = sluicev1connect.NewReplicaServiceClient(asBroker1, b3, connect.WithGRPC(), token).
		FetchReplicas(ctx, connect.NewRequest(&sluicev1.FetchReplicasRequest{FollowerId: 2}))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "broker 1's certificate fetching as follower 2: %v", err)
}
