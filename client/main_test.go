package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/dataplane/broker"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// The package's tests and examples share one in-process cluster: a control
// plane on SQLite and three brokers on loopback, like `sluice dev`. Fault
// tests with separate processes live in e2e/.
var (
	endpoint string // control plane, "http://127.0.0.1:port"
	apiKey   string // the test tenant's key
)

// The cluster's shared secrets.
const brokerToken, operatorToken = "broker-secret-for-tests-0123456789", "operator-secret-for-tests-0123456789"

func TestMain(m *testing.M) {
	ctx, cancel := context.WithCancel(context.Background())
	dir, err := os.MkdirTemp("", "sluice-client-test-")
	if err != nil {
		panic(err)
	}
	stop, err := startCluster(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start cluster:", err)
		os.Exit(1)
	}
	code := m.Run()
	cancel()
	stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

func startCluster(ctx context.Context, dir string) (func(), error) {
	cfg := controlplane.DefaultConfig()
	cfg.DatabaseURL = "sqlite:" + filepath.Join(dir, "cp.db")
	cfg.BrokerToken, cfg.OperatorToken = brokerToken, operatorToken
	cfg.DefaultReplicationFactor = 3
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.ListenAddr = ln.Addr().String()
	srv, err := controlplane.New(ctx, cfg, controlplane.Deps{})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{}, 4)
	go func() { _ = srv.Run(ctx, ln, nil); done <- struct{}{} }()
	endpoint = "http://" + ln.Addr().String()
	for i := range 3 {
		bc := broker.DefaultConfig()
		bc.ID = int32(i + 1)
		bc.DataDir = filepath.Join(dir, fmt.Sprintf("broker-%d", i+1))
		bc.ControlPlane = endpoint
		bc.BrokerToken = brokerToken
		bc.RetentionCheckInterval = 200 * time.Millisecond
		bc.GroupHeartbeatInterval, bc.GroupSessionTimeout = 300*time.Millisecond, 10*time.Second
		bln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		bc.ListenAddr, bc.AdvertisedAddr = bln.Addr().String(), bln.Addr().String()
		b, err := broker.New(bc, broker.Deps{})
		if err != nil {
			return nil, err
		}
		go func() { _ = b.Run(ctx, bln, nil); done <- struct{}{} }()
	}
	stop := func() {
		for range 4 {
			<-done
		}
		srv.Close()
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	op := sluicev1connect.NewOperatorServiceClient(hc, endpoint, connect.WithInterceptors(tenants.Bearer(operatorToken)))
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := op.ListBrokers(ctx, connect.NewRequest(&sluicev1.ListBrokersRequest{}))
		live := 0
		if err == nil {
			for _, b := range res.Msg.GetBrokers() {
				if b.GetLive() {
					live++
				}
			}
		}
		if live == 3 {
			break
		}
		if time.Now().After(deadline) {
			return stop, fmt.Errorf("brokers not live after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll: until the brokers are live
	}
	su, err := sluicev1connect.NewTenantServiceClient(hc, endpoint).Signup(ctx,
		connect.NewRequest(&sluicev1.SignupRequest{Email: "sdk@example.com", TenantName: "sdk"}))
	if err != nil {
		return stop, err
	}
	apiKey = su.Msg.GetApiKeySecret()
	// The pro plan's topic limit fits every test and example.
	pro := "pro"
	if _, err := op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: su.Msg.GetTenant().GetId(), Plan: &pro})); err != nil {
		return stop, err
	}
	return stop, nil
}

// createTopic creates a topic (RF 3) and waits until every partition has a
// leader that the brokers know about.
func createTopic(tb testing.TB, name string, partitions int32, config *sluicev1.TopicConfig) {
	tb.Helper()
	if err := createTopicErr(name, partitions, config); err != nil {
		tb.Fatalf("create topic %s: %v", name, err)
	}
}

func createTopicErr(name string, partitions int32, config *sluicev1.TopicConfig) error {
	return createTopicAs(apiKey, name, partitions, config)
}

// createTopicAs is createTopicErr for the tenant of key.
func createTopicAs(key, name string, partitions int32, config *sluicev1.TopicConfig) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	tok, err := sluicev1connect.NewAuthServiceClient(hc, endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: key}))
	if err != nil {
		return err
	}
	topics := sluicev1connect.NewTopicServiceClient(hc, endpoint, connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken())))
	if _, err := topics.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: name, PartitionCount: partitions, ReplicationFactor: 3, Config: config})); err != nil {
		return err
	}
	// Ready when every partition has a leader and a full ISR at the control
	// plane, and every broker's metadata names that leader at that epoch.
	auth := connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken()))
	for {
		ready, err := topicReady(ctx, hc, topics, auth, name)
		if err != nil || ready {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// topicReady reports whether the control plane names a leader and a full
// ISR for every partition of topic name and every broker's metadata agrees.
func topicReady(ctx context.Context, hc *http.Client, topics sluicev1connect.TopicServiceClient, auth connect.ClientOption, name string) (bool, error) {
	res, err := topics.DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: name}))
	if err != nil {
		return false, err
	}
	want := map[int32][2]int32{} // partition → leader, epoch
	for _, pt := range res.Msg.GetPartitions() {
		if pt.GetLeader() < 0 || len(pt.GetIsr()) < 3 {
			return false, nil
		}
		want[pt.GetPartition()] = [2]int32{pt.GetLeader(), pt.GetLeaderEpoch()}
	}
	md, err := sluicev1connect.NewRecordServiceClient(hc, endpoint, auth).GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{}}))
	if err != nil {
		return false, err
	}
	for _, b := range md.Msg.GetBrokers() {
		bm, err := sluicev1connect.NewRecordServiceClient(hc, "http://"+b.GetAddress(), auth).GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{name}}))
		if err != nil {
			return false, nil // not serving the tenant yet
		}
		seen := 0
		for _, tm := range bm.Msg.GetTopics() {
			for _, pm := range tm.GetPartitions() {
				if w, ok := want[pm.GetPartition()]; !ok || w != [2]int32{pm.GetLeader(), pm.GetLeaderEpoch()} {
					return false, nil
				}
				seen++
			}
		}
		if seen != len(want) {
			return false, nil
		}
	}
	return len(md.Msg.GetBrokers()) > 0, nil
}

// mustCreateTopic is createTopic for examples, which have no testing.TB.
func mustCreateTopic(name string, partitions int32) {
	if err := createTopicErr(name, partitions, nil); err != nil {
		panic(fmt.Sprintf("create topic %s: %v", name, err))
	}
}
