package client_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/clientlimit"
	"github.com/sluicemq/sluice/dataplane/broker"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/localcluster/brokernode"
	"github.com/sluicemq/sluice/tenants"
)

// The package's tests and examples share one in-process cluster: a control
// plane on SQLite and three brokers on loopback, like `sluice dev`. Fault
// tests with separate processes live in e2e/.
var (
	endpoint string // control plane, "http://127.0.0.1:port"
	apiKey   string // the test tenant's key
	// cluster is the package's cluster, for its faults (AddFault).
	cluster *localcluster.Cluster
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

// startCluster starts the package's cluster (internal/localcluster, as
// sluice dev wires it) and signs the test tenant up on the pro plan, whose
// topic limit fits every test and example.
func startCluster(ctx context.Context, dir string) (func(), error) {
	c, err := localcluster.New(ctx, localcluster.Options{
		DataDir: dir, BrokerToken: brokerToken, OperatorToken: operatorToken,
		// Tests sign tenants up of their own (quotaTenant), again with
		// -count=N: more than one address may sign up for in production.
		ControlPlane: func(cfg *controlplane.Config) {
			cfg.ClientLimits.Signup = clientlimit.Limit{Burst: 1000, Every: time.Millisecond}
		},
		NewBroker: brokernode.New(brokernode.Options{Config: func(bc *broker.Config) {
			bc.RetentionCheckInterval = 200 * time.Millisecond
			bc.GroupHeartbeatInterval, bc.GroupSessionTimeout = 300*time.Millisecond, 10*time.Second
		}}),
	})
	if err != nil {
		return nil, err
	}
	stop := func() { _ = c.Close() }
	cluster, endpoint = c, c.Endpoint
	if err := c.StartBrokers(ctx); err != nil {
		return stop, err
	}
	if err := c.WaitBrokers(ctx, 30*time.Second); err != nil {
		return stop, err
	}
	t, err := c.SignUp(ctx, "sdk@example.com", "sdk", "pro")
	if err != nil {
		return stop, err
	}
	apiKey = t.APIKey
	return stop, nil
}

// fresh returns name the first time the package's tests ask for it, and
// name-2, name-3, ... after. The package's cluster outlives every test, so
// a test run again (go test -count=N) names its topics, groups,
// transactional ids and tenants with fresh and finds none of the state the
// runs before it left (a topic that exists, a group's members and offsets,
// a producer's epoch).
func fresh(name string) string {
	freshNames.Lock()
	defer freshNames.Unlock()
	freshNames.n[name]++
	if n := freshNames.n[name]; n > 1 {
		return fmt.Sprintf("%s-%d", name, n)
	}
	return name
}

var freshNames = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

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
