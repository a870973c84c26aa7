package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// TestTLSCapture is the hostile suite's passive observer: tshark captures
// every packet on the loopback interface while a cluster with TLS on every
// listener starts (brokers registering with the broker token), a tenant
// signs up and logs in (its API key), and the SDK and the CLI produce and
// consume (its JWTs), and a Kafka client produces and consumes with SASL
// PLAIN over TLS (its API key again); the control plane calls the brokers
// too. No API key,
// JWT or token of the cluster appears in the capture, neither in the raw
// bytes nor in any HTTP/2 header tshark can decode. A cleartext HTTP/2
// call captured alongside, carrying a canary token in its headers and a
// canary key in its body, shows that the same search finds a secret that
// crosses in the clear.
func TestTLSCapture(t *testing.T) {
	t.Parallel()
	tshark := testenv.DebianTool(t, "tshark", "tshark")
	dir := t.TempDir()
	pcapFile := filepath.Join(dir, "lo.pcapng")
	stop := capture(t, tshark, pcapFile)

	c := testcluster.Start(t, testcluster.Options{Bin: plainBin, DatabaseURL: testenv.PostgresURL(t), TLS: true, Kafka: true})
	tc := c.NewClient(t, "observed", "orders", 3, 2)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(c.CA.CertPEM()))
	cl, err := client.New(t.Context(), c.ControlPlane(), client.APIKey(tc.APIKey), client.WithTLS(&tls.Config{RootCAs: pool}))
	require.NoError(t, err)
	defer cl.Close()
	p, err := cl.NewProducer(t.Context())
	require.NoError(t, err)
	run := produceSteadily(t, p, "orders", 200, 1000)
	require.Empty(t, run.failed)
	require.NoError(t, p.Close(t.Context()))
	readBack(t, cl, "orders")
	cfg := filepath.Join(dir, "cli.json")
	mustCLI(t, cfg, "--endpoint", c.ControlPlane(), "--ca-file", c.CAFile, "login", "--api-key", tc.APIKey)
	mustCLI(t, cfg, "produce", "orders", "--value", "observed")
	require.Contains(t, mustCLI(t, cfg, "consume", "orders"), "observed\n")
	mustCLI(t, cfg, "group", "list")
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaBootstrap()...), kgo.DialTLSConfig(&tls.Config{RootCAs: pool}),
		kgo.SASL(plain.Auth{User: "observed", Pass: tc.APIKey}.AsMechanism()),
		kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer kcl.Close()
	require.NoError(t, kcl.ProduceSync(t.Context(), &kgo.Record{Topic: "orders", Value: []byte("over kafka")}).FirstErr())
	require.NoError(t, kcl.PollFetches(t.Context()).Err0())

	canaryToken, canaryKey := "canary-token-"+tc.TenantID, "canary-key-"+tc.TenantID
	canaryAddr := cleartextCall(t, canaryToken, canaryKey)

	// The canary went last: once the file holds it (dumpcap writes what
	// it reads from the kernel a moment later), it holds everything.
	testenv.Wait(t, 30*time.Second, "the capture holds the canary's cleartext body", func() error {
		raw, err := os.ReadFile(pcapFile)
		if err != nil || !bytes.Contains(raw, []byte(canaryKey)) {
			return fmt.Errorf("not yet (%v)", err)
		}
		return nil
	})
	pcap := stop()
	// Every listener of the cluster is decoded as HTTP/2 (cleartext, it
	// would show the headers; TLS, it shows none).
	addrs := []string{canaryAddr, strings.TrimPrefix(c.ControlPlane(), "https://"), c.ControlPlaneMetricsAddr()}
	for _, id := range c.BrokerIDs() {
		addrs = append(addrs, c.Broker(id).ListenAddr, c.Broker(id).MetricsAddr)
	}
	headers := decodedHeaders(t, tshark, pcap, addrs)
	require.Contains(t, headers, canaryToken, "tshark decodes cleartext HTTP/2 headers")
	raw, err := os.ReadFile(pcap)
	require.NoError(t, err)

	secrets := map[string]string{"API key": tc.APIKey, "tenant JWT": tc.Token()}
	for i, s := range c.Secrets() {
		secrets[[]string{"operator token", "broker token"}[i]] = s
	}
	for name, s := range secrets {
		require.False(t, bytes.Contains(raw, []byte(s)), "the %s crossed loopback in the clear", name)
		require.NotContains(t, headers, s, "the %s is in a decoded HTTP/2 header", name)
		// A token's signature alone is as good as the whole.
		if i := strings.LastIndexByte(s, '.'); i > 0 {
			require.False(t, bytes.Contains(raw, []byte(s[i+1:])), "the %s's signature crossed loopback in the clear", name)
		}
	}
}

// capture runs tshark on the loopback interface into pcap until stop,
// which returns pcap.
func capture(t *testing.T, tshark, pcap string) (stop func() string) {
	t.Helper()
	cmd := exec.Command(tshark, "-i", "lo", "-w", pcap)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	log := &syncBuffer{}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = log.Write([]byte(sc.Text() + "\n"))
			if strings.HasPrefix(sc.Text(), "Capturing on") {
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("tshark did not start capturing within 30 s:\n%s", log.String())
	}
	done := false
	t.Cleanup(func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return func() string {
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		_ = cmd.Wait() // tshark exits 0 or with the signal once the file is written
		done = true
		return pcap
	}
}

// decodedHeaders is every HTTP/2 header value tshark decodes in pcap,
// with the TCP traffic of addrs' ports decoded as HTTP/2 (tshark does not
// guess cleartext HTTP/2 on other ports than its own). Only addrs' traffic
// is decoded: the capture holds the whole loopback interface, so every
// parallel test's traffic too, and dissecting all of it took tshark past
// its 2 minutes with every core busy; tcpdump keeps addrs' ports first,
// with a BPF filter and no dissection.
func decodedHeaders(t *testing.T, tshark, pcap string, addrs []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var ports []string
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		require.NoError(t, err)
		ports = append(ports, port)
	}
	tcpdump := testenv.DebianTool(t, "tcpdump", "tcpdump")
	ours := pcap + ".ours.pcap"
	out, err := exec.CommandContext(ctx, tcpdump, "-r", pcap, "-w", ours, "tcp port "+strings.Join(ports, " or tcp port ")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	args := []string{"-r", ours}
	for _, port := range ports {
		args = append(args, "-d", "tcp.port=="+port+",http2")
	}
	out, err = exec.CommandContext(ctx, tshark, append(args, "-Y", "http2.header", "-T", "fields", "-e", "http2.header.value")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// cleartextCall makes one HTTP/2 call without TLS, on loopback, with
// token in its authorization header and key in its body, and returns the
// server's address.
func cleartextCall(t *testing.T, token, key string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	var none *tlsfiles.Source
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+ln.Addr().String()+"/sluice.v1.AuthService/CreateToken",
		strings.NewReader(`{"api_key": "`+key+`"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := none.HTTPClient().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return ln.Addr().String()
}
