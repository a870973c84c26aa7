package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/api"
	"github.com/sluicemq/sluice/controlplane/clientlimit"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// Most tests wait on brokers, controllers and loops of their own: alone
// and idle, six at a time ran the package in 46 s instead of 79 s (two,
// GOMAXPROCS) for 78 CPU-s instead of 66.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(6)
	testenv.Main(m)
}

const (
	operatorToken = "operator-secret-0123456789"
	brokerToken   = "broker-secret-0123456789"
)

// cluster is a control plane served over real HTTP/2 (h2c) on loopback.
type cluster struct {
	endpoint string
	// metrics is the operator listener's URL (metrics, health).
	metrics  string
	hc       *http.Client
	streamHC *http.Client // no overall timeout, for WatchAssignments
	srv      *controlplane.Server
	// stop shuts the server down (idempotent; also run at cleanup).
	stop func()
	// clock is the server's clock when a test moves it (startAt); nil on
	// the real clock.
	clock *clock.Fake
}

// drivers runs fn once against each store driver.
func drivers(t *testing.T, fn func(t *testing.T, dbURL string)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, testenv.PostgresURL(t))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, "sqlite:"+t.TempDir()+"/cp.db")
	})
}

func start(t *testing.T, dbURL string, mutate ...func(*controlplane.Config)) *cluster {
	t.Helper()
	return startWith(t, dbURL, nil, mutate...)
}

// startWith is start with the store opened here and passed to the server
// through wrap (a test's wrapper that counts calls, say), when wrap is not
// nil.
func startWith(t *testing.T, dbURL string, wrap func(store.Store) store.Store, mutate ...func(*controlplane.Config)) *cluster {
	t.Helper()
	return startAt(t, dbURL, nil, wrap, mutate...)
}

// startAt is startWith on clk, a fake clock the test moves (nil: the real
// clock).
func startAt(t *testing.T, dbURL string, clk *clock.Fake, wrap func(store.Store) store.Store, mutate ...func(*controlplane.Config)) *cluster {
	t.Helper()
	var deps controlplane.Deps
	if clk != nil {
		deps.Clock = clk
	}
	if wrap != nil {
		st, err := controlplane.OpenStore(context.Background(), dbURL, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		deps.Store = wrap(st)
		dbURL = ""
	}
	cfg := controlplane.DefaultConfig()
	cfg.DatabaseURL = dbURL
	cfg.OperatorToken = operatorToken
	cfg.BrokerToken = brokerToken
	// These tests count partitions, elections and load: keep the internal
	// offsets and transaction-state topics out of them (they need 7 live
	// brokers here).
	cfg.OffsetsTopicReplicationFactor = 7
	cfg.TransactionStateTopicReplicationFactor = 7
	// Every request comes from loopback: tests sign up tenant after tenant
	// and try bad keys on purpose. The per-client limits' own test sets
	// them; the others must not run into production's.
	cfg.ClientLimits.Signup = clientlimit.Limit{Burst: 1000, Every: time.Millisecond}
	cfg.ClientLimits.TokenFailures = clientlimit.Limit{Burst: 1000, Every: time.Millisecond}
	for _, m := range mutate {
		m(&cfg)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	deps.Logger = logger
	srv, err := controlplane.New(ctx, cfg, deps)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ops, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln, ops) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
			require.NoError(t, srv.Close())
		})
	}
	t.Cleanup(stop)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return &cluster{endpoint: "http://" + ln.Addr().String(), metrics: "http://" + ops.Addr().String(), hc: hc, streamHC: &http.Client{Transport: tr}, srv: srv, stop: stop, clock: clk}
}

// untimed is c whose API clients have no overall timeout: for calls that
// wait their turn behind many others, bounded by their context.
func (c *cluster) untimed() *cluster {
	u := *c
	u.hc = c.streamHC
	return &u
}

func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(tenants.Bearer(token))
}

func (c *cluster) tenants(token string) sluicev1connect.TenantServiceClient {
	return sluicev1connect.NewTenantServiceClient(c.hc, c.endpoint, bearer(token), connect.WithGRPC())
}
func (c *cluster) auth() sluicev1connect.AuthServiceClient {
	return sluicev1connect.NewAuthServiceClient(c.hc, c.endpoint, connect.WithGRPC())
}
func (c *cluster) keys(token string) sluicev1connect.APIKeyServiceClient {
	return sluicev1connect.NewAPIKeyServiceClient(c.hc, c.endpoint, bearer(token))
}
func (c *cluster) topics(token string) sluicev1connect.TopicServiceClient {
	return sluicev1connect.NewTopicServiceClient(c.hc, c.endpoint, bearer(token), connect.WithGRPC())
}
func (c *cluster) operator(token string) sluicev1connect.OperatorServiceClient {
	return sluicev1connect.NewOperatorServiceClient(c.hc, c.endpoint, bearer(token))
}
func (c *cluster) brokers(token string) sluicev1connect.BrokerServiceClient {
	return sluicev1connect.NewBrokerServiceClient(c.hc, c.endpoint, bearer(token))
}

// registerBrokers joins n brokers in racks a, b, c, … as a broker would.
func (c *cluster) registerBrokers(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		res, err := c.brokers(brokerToken).RegisterBroker(ctx, connect.NewRequest(&sluicev1.RegisterBrokerRequest{
			BrokerId: int32(i + 1), Address: fmt.Sprintf("127.0.0.1:%d", 9100+i), Rack: string(rune('a' + i%3)),
		}))
		require.NoError(t, err)
		require.Positive(t, res.Msg.GetBrokerEpoch())
	}
}

type account struct {
	tenantID string
	apiKey   string
	keyID    string
	token    string
}

func (c *cluster) signup(t *testing.T, name string) account {
	t.Helper()
	ctx := context.Background()
	res, err := c.tenants("").Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: name + "@example.com", TenantName: name}))
	require.NoError(t, err)
	require.Equal(t, "free", res.Msg.GetTenant().GetPlan())
	require.True(t, strings.HasPrefix(res.Msg.GetApiKeySecret(), tenants.APIKeyPrefix))
	tok, err := c.auth().CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: res.Msg.GetApiKeySecret()}))
	require.NoError(t, err)
	require.Equal(t, res.Msg.GetTenant().GetId(), tok.Msg.GetTenantId())
	return account{tenantID: res.Msg.GetTenant().GetId(), apiKey: res.Msg.GetApiKeySecret(), keyID: res.Msg.GetApiKey().GetId(), token: tok.Msg.GetToken()}
}

func requireCode(t *testing.T, want connect.Code, err error, msgContains ...string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want, connect.CodeOf(err), "error: %v", err)
	for _, s := range msgContains {
		require.Contains(t, err.Error(), s)
	}
}

func TestControlPlaneSignupToTopicsAndIsolation(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		c.registerBrokers(t, 3)
		ctx := context.Background()
		alice := c.signup(t, "alice")
		bob := c.signup(t, "bob")

		created, err := c.topics(alice.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 6}))
		require.NoError(t, err)
		tp := created.Msg.GetTopic()
		require.Equal(t, int32(3), tp.GetReplicationFactor(), "default RF")
		require.Equal(t, int64(7*24*3600*1000), tp.GetConfig().GetRetentionMs())
		require.Equal(t, int32(2), tp.GetConfig().GetMinInsyncReplicas())
		require.Len(t, created.Msg.GetPartitions(), 6)
		leaders := map[int32]int{}
		for _, p := range created.Msg.GetPartitions() {
			require.Len(t, p.GetReplicas(), 3)
			require.ElementsMatch(t, []int32{1, 2, 3}, p.GetReplicas(), "replicas on distinct brokers")
			require.Equal(t, p.GetReplicas()[0], p.GetLeader())
			require.ElementsMatch(t, p.GetReplicas(), p.GetIsr())
			leaders[p.GetLeader()]++
		}
		require.Equal(t, map[int32]int{1: 2, 2: 2, 3: 2}, leaders, "leaders spread evenly")

		list, err := c.topics(alice.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err)
		require.Len(t, list.Msg.GetTopics(), 1)
		require.Equal(t, tp.GetId(), list.Msg.GetTopics()[0].GetId())

		// Bob cannot see, describe, alter or delete Alice's topic: NotFound, as if missing.
		list, err = c.topics(bob.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err)
		require.Empty(t, list.Msg.GetTopics())
		_, err = c.topics(bob.token).DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: "orders"}))
		requireCode(t, connect.CodeNotFound, err, `topic "orders" not found`)
		_, err = c.topics(bob.token).DeleteTopic(ctx, connect.NewRequest(&sluicev1.DeleteTopicRequest{Name: "orders"}))
		requireCode(t, connect.CodeNotFound, err)
		_, err = c.topics(bob.token).UpdateTopicConfig(ctx, connect.NewRequest(&sluicev1.UpdateTopicConfigRequest{Name: "orders", Config: &sluicev1.TopicConfig{RetentionMs: ptr(int64(1000))}}))
		requireCode(t, connect.CodeNotFound, err)
		// Bob's keys list does not show Alice's, and he cannot revoke hers.
		_, err = c.keys(bob.token).RevokeAPIKey(ctx, connect.NewRequest(&sluicev1.RevokeAPIKeyRequest{Id: alice.keyID}))
		requireCode(t, connect.CodeNotFound, err)
		// The same name in Bob's tenant is a different topic.
		bobs, err := c.topics(bob.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 1, ReplicationFactor: 1}))
		require.NoError(t, err)
		require.NotEqual(t, tp.GetId(), bobs.Msg.GetTopic().GetId())

		// Alice still has hers, and can alter and delete it.
		desc, err := c.topics(alice.token).DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: "orders"}))
		require.NoError(t, err)
		require.Equal(t, int32(6), desc.Msg.GetTopic().GetPartitionCount())
		require.Len(t, desc.Msg.GetPartitions(), 6)
		upd, err := c.topics(alice.token).UpdateTopicConfig(ctx, connect.NewRequest(&sluicev1.UpdateTopicConfigRequest{Name: "orders", Config: &sluicev1.TopicConfig{RetentionMs: ptr(int64(3600_000))}}))
		require.NoError(t, err)
		require.Equal(t, int64(3600_000), upd.Msg.GetTopic().GetConfig().GetRetentionMs())
		require.Equal(t, int32(2), upd.Msg.GetTopic().GetConfig().GetMinInsyncReplicas(), "unset fields keep their value")
		_, err = c.topics(alice.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 1}))
		requireCode(t, connect.CodeAlreadyExists, err, `topic "orders" already exists`)
		_, err = c.topics(alice.token).DeleteTopic(ctx, connect.NewRequest(&sluicev1.DeleteTopicRequest{Name: "orders"}))
		require.NoError(t, err)
		_, err = c.topics(alice.token).DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: "orders"}))
		requireCode(t, connect.CodeNotFound, err)
		// Bob's topic survived Alice's delete.
		_, err = c.topics(bob.token).DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: "orders"}))
		require.NoError(t, err)

		me, err := c.tenants(alice.token).GetTenant(ctx, connect.NewRequest(&sluicev1.GetTenantRequest{}))
		require.NoError(t, err)
		require.Equal(t, alice.tenantID, me.Msg.GetTenant().GetId())
		require.Equal(t, int64(0), me.Msg.GetUsage().GetTopics())
		require.Equal(t, int32(10), me.Msg.GetTenant().GetLimits().GetMaxTopics())
	})
}

func TestControlPlaneAPIKeysAndRevocation(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		c.registerBrokers(t, 1)
		ctx := context.Background()
		a := c.signup(t, "carol")

		// A produce-only key cannot manage topics or keys, nor mint a broader key.
		k, err := c.keys(a.token).CreateAPIKey(ctx, connect.NewRequest(&sluicev1.CreateAPIKeyRequest{Name: "ci", Scopes: []string{"produce"}}))
		require.NoError(t, err)
		tok, err := c.auth().CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: k.Msg.GetSecret()}))
		require.NoError(t, err)
		require.Equal(t, []string{"produce"}, tok.Msg.GetScopes())
		_, err = c.topics(tok.Msg.GetToken()).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "x", PartitionCount: 1, ReplicationFactor: 1}))
		requireCode(t, connect.CodePermissionDenied, err, `"admin" scope`)
		_, err = c.keys(tok.Msg.GetToken()).CreateAPIKey(ctx, connect.NewRequest(&sluicev1.CreateAPIKeyRequest{Name: "x"}))
		requireCode(t, connect.CodePermissionDenied, err)
		// Reads need no particular scope.
		_, err = c.topics(tok.Msg.GetToken()).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err)

		// Listing never shows secrets.
		list, err := c.keys(a.token).ListAPIKeys(ctx, connect.NewRequest(&sluicev1.ListAPIKeysRequest{}))
		require.NoError(t, err)
		require.Len(t, list.Msg.GetApiKeys(), 2)
		for _, key := range list.Msg.GetApiKeys() {
			require.NotContains(t, key.String(), "slk_")
		}

		// Revoking the key makes the token minted from it fail at once, and the key too.
		_, err = c.keys(a.token).RevokeAPIKey(ctx, connect.NewRequest(&sluicev1.RevokeAPIKeyRequest{Id: k.Msg.GetApiKey().GetId()}))
		require.NoError(t, err)
		_, err = c.topics(tok.Msg.GetToken()).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err, "revoked")
		_, err = c.auth().CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: k.Msg.GetSecret()}))
		requireCode(t, connect.CodeUnauthenticated, err, "revoked")
		// Revoke is idempotent.
		_, err = c.keys(a.token).RevokeAPIKey(ctx, connect.NewRequest(&sluicev1.RevokeAPIKeyRequest{Id: k.Msg.GetApiKey().GetId()}))
		require.NoError(t, err)
		// The brokers' revocation feed lists it.
		feed, err := c.brokers(brokerToken).ListRevokedAPIKeys(ctx, connect.NewRequest(&sluicev1.ListRevokedAPIKeysRequest{}))
		require.NoError(t, err)
		require.Len(t, feed.Msg.GetKeys(), 1)
		require.Equal(t, k.Msg.GetApiKey().GetId(), feed.Msg.GetKeys()[0].GetId())
		require.Equal(t, a.tenantID, feed.Msg.GetKeys()[0].GetTenantId())
		// The admin key is unaffected.
		_, err = c.topics(a.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err)
	})
}

func TestControlPlaneBadInput(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		c.registerBrokers(t, 2)
		ctx := context.Background()
		a := c.signup(t, "dave")
		tc := c.topics(a.token)
		create := func(r *sluicev1.CreateTopicRequest) error {
			_, err := tc.CreateTopic(ctx, connect.NewRequest(r))
			return err
		}
		for _, tt := range []struct {
			name string
			req  *sluicev1.CreateTopicRequest
			code connect.Code
			msg  string
		}{
			{"empty name", &sluicev1.CreateTopicRequest{Name: "", PartitionCount: 1}, connect.CodeInvalidArgument, "name: must not be empty"},
			{"bad char", &sluicev1.CreateTopicRequest{Name: "a/b", PartitionCount: 1}, connect.CodeInvalidArgument, `character '/'`},
			{"dotdot", &sluicev1.CreateTopicRequest{Name: "..", PartitionCount: 1}, connect.CodeInvalidArgument, `".." is not allowed`},
			{"too long", &sluicev1.CreateTopicRequest{Name: strings.Repeat("a", 250), PartitionCount: 1}, connect.CodeInvalidArgument, "maximum is 249"},
			{"internal", &sluicev1.CreateTopicRequest{Name: "__offsets", PartitionCount: 1}, connect.CodeInvalidArgument, "reserved"},
			{"zero partitions", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 0}, connect.CodeInvalidArgument, "partition_count: must be at least 1"},
			{"negative rf", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1, ReplicationFactor: -1}, connect.CodeInvalidArgument, "replication_factor"},
			{"rf above live brokers", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1, ReplicationFactor: 3}, connect.CodeFailedPrecondition, "needs 3 live brokers; 2 live"},
			{"default rf above live brokers", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1}, connect.CodeFailedPrecondition, "needs 3 live brokers"},
			{"retention over plan", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1, ReplicationFactor: 2, Config: &sluicev1.TopicConfig{RetentionMs: ptr(int64(30 * 24 * 3600 * 1000))}}, connect.CodeInvalidArgument, "exceeds the free plan's maximum retention of 7d"},
			{"unlimited retention on free", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1, ReplicationFactor: 2, Config: &sluicev1.TopicConfig{RetentionMs: ptr(int64(-1))}}, connect.CodeInvalidArgument, "retention_ms"},
			{"min isr above rf", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1, ReplicationFactor: 2, Config: &sluicev1.TopicConfig{MinInsyncReplicas: ptr(int32(3))}}, connect.CodeInvalidArgument, "min_insync_replicas"},
			{"message size over plan", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1, ReplicationFactor: 2, Config: &sluicev1.TopicConfig{MaxMessageBytes: ptr(int32(64 << 20))}}, connect.CodeInvalidArgument, "max_message_bytes"},
			{"compaction", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 1, ReplicationFactor: 2, Config: &sluicev1.TopicConfig{CleanupPolicy: ptr("compact")}}, connect.CodeInvalidArgument, "cleanup_policy"},
			{"partitions over plan", &sluicev1.CreateTopicRequest{Name: "t", PartitionCount: 31, ReplicationFactor: 2}, connect.CodeResourceExhausted, "partitions limit reached: the tenant may have 30"},
		} {
			requireCode(t, tt.code, create(tt.req), tt.msg)
			_ = tt.name
		}

		// Names that collide in metrics ('.' vs '_') are refused, like Kafka.
		require.NoError(t, create(&sluicev1.CreateTopicRequest{Name: "a.b", PartitionCount: 1, ReplicationFactor: 1}))
		requireCode(t, connect.CodeInvalidArgument, create(&sluicev1.CreateTopicRequest{Name: "a_b", PartitionCount: 1, ReplicationFactor: 1}), `collides with existing topic "a.b"`)

		// Missing, garbage, oversized and wrong-kind credentials.
		_, err := c.topics("").ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)
		_, err = c.topics("not-a-jwt").ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)
		_, err = c.topics(strings.Repeat(".", 9000)).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)
		_, err = c.topics(a.apiKey).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err, "an API key is not a token")
		_, err = c.operator(a.token).ListTenants(ctx, connect.NewRequest(&sluicev1.ListTenantsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)
		_, err = c.brokers(a.token).RegisterBroker(ctx, connect.NewRequest(&sluicev1.RegisterBrokerRequest{BrokerId: 9, Address: "127.0.0.1:1"}))
		requireCode(t, connect.CodeUnauthenticated, err)
		_, err = c.auth().CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: "slk_0123456789abcdef_nope"}))
		requireCode(t, connect.CodeUnauthenticated, err)

		// An oversized request is refused before it is decoded.
		_, err = tc.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: strings.Repeat("x", 2<<20), PartitionCount: 1}))
		requireCode(t, connect.CodeResourceExhausted, err)

		// Signup validation and uniqueness.
		_, err = c.tenants("").Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: "not an email", TenantName: "eve"}))
		requireCode(t, connect.CodeInvalidArgument, err, "email")
		_, err = c.tenants("").Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: "eve@example.com", TenantName: "Eve!"}))
		requireCode(t, connect.CodeInvalidArgument, err, "tenant_name")
		_, err = c.tenants("").Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: "other@example.com", TenantName: "dave"}))
		requireCode(t, connect.CodeAlreadyExists, err, "tenant name or email is already registered")
		_, err = c.tenants("").Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: "DAVE@example.com", TenantName: "dave2"}))
		requireCode(t, connect.CodeAlreadyExists, err, "tenant name or email is already registered")

		// Broker registration validates too; a stale epoch is fenced.
		_, err = c.brokers(brokerToken).RegisterBroker(ctx, connect.NewRequest(&sluicev1.RegisterBrokerRequest{BrokerId: 7, Address: "no-port"}))
		requireCode(t, connect.CodeInvalidArgument, err, "address")
		_, err = c.brokers(brokerToken).HeartbeatBroker(ctx, connect.NewRequest(&sluicev1.HeartbeatBrokerRequest{BrokerId: 1, BrokerEpoch: 99}))
		requireCode(t, connect.CodeFailedPrecondition, err, "stale")
		_, err = c.brokers(brokerToken).HeartbeatBroker(ctx, connect.NewRequest(&sluicev1.HeartbeatBrokerRequest{BrokerId: 42, BrokerEpoch: 1}))
		requireCode(t, connect.CodeNotFound, err)
	})
}

func TestControlPlaneTopicLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		c.registerBrokers(t, 1)
		a := c.signup(t, "frank")
		var ok, exhausted atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Go(func() {
				_, err := c.topics(a.token).CreateTopic(context.Background(), connect.NewRequest(&sluicev1.CreateTopicRequest{
					Name: fmt.Sprintf("t%02d", i), PartitionCount: 1, ReplicationFactor: 1,
				}))
				switch connect.CodeOf(err) {
				case connect.CodeResourceExhausted:
					exhausted.Add(1)
				default:
					if err != nil {
						errs <- err
						return
					}
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int32(10), ok.Load(), "the free plan allows 10 topics")
		require.Equal(t, int32(40), exhausted.Load())
		list, err := c.topics(a.token).ListTopics(context.Background(), connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err)
		require.Len(t, list.Msg.GetTopics(), 10)
	})
}

func TestControlPlaneOperatorOverrides(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		c.registerBrokers(t, 1)
		ctx := context.Background()
		a := c.signup(t, "grace")
		op := c.operator(operatorToken)
		res, err := op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: a.tenantID, Overrides: &sluicev1.LimitOverrides{MaxTopics: ptr(int32(1))}}))
		require.NoError(t, err)
		require.Equal(t, int32(1), res.Msg.GetTenant().GetLimits().GetMaxTopics())
		_, err = c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "one", PartitionCount: 1, ReplicationFactor: 1}))
		require.NoError(t, err)
		_, err = c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "two", PartitionCount: 1, ReplicationFactor: 1}))
		requireCode(t, connect.CodeResourceExhausted, err, "topics limit reached: the tenant may have 1 (free plan and overrides); 1 in use")

		// Upgrading to pro lifts the retention cap; overrides still apply.
		_, err = op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: a.tenantID, Plan: ptr("pro"), Overrides: &sluicev1.LimitOverrides{}}))
		require.NoError(t, err)
		_, err = c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "two", PartitionCount: 1, ReplicationFactor: 1, Config: &sluicev1.TopicConfig{RetentionMs: ptr(int64(30 * 24 * 3600 * 1000))}}))
		require.NoError(t, err)

		// A suspended tenant is refused.
		_, err = op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: a.tenantID, Status: ptr("suspended")}))
		require.NoError(t, err)
		_, err = c.topics(a.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		requireCode(t, connect.CodePermissionDenied, err, "suspended")

		_, err = op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: a.tenantID, Plan: ptr("platinum")}))
		requireCode(t, connect.CodeInvalidArgument, err, "plan")
		_, err = op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: "00000000-0000-0000-0000-000000000000"}))
		requireCode(t, connect.CodeNotFound, err)
		_, err = c.operator("wrong-operator-token-123").ListTenants(ctx, connect.NewRequest(&sluicev1.ListTenantsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)

		tl, err := op.ListTenants(ctx, connect.NewRequest(&sluicev1.ListTenantsRequest{}))
		require.NoError(t, err)
		require.Len(t, tl.Msg.GetTenants(), 1)
		bl, err := op.ListBrokers(ctx, connect.NewRequest(&sluicev1.ListBrokersRequest{}))
		require.NoError(t, err)
		require.Len(t, bl.Msg.GetBrokers(), 1)
		require.True(t, bl.Msg.GetBrokers()[0].GetLive())
	})
}

// TestControlPlaneSuspensionFeed: a suspended tenant is refused at once on
// the control plane, cannot mint tokens, and is in the brokers' feed
// (every answer, whatever since says); reinstated, it leaves the feed and
// its old token and key work again. Another tenant is unaffected.
func TestControlPlaneSuspensionFeed(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		ctx := context.Background()
		a := c.signup(t, "judy")
		b := c.signup(t, "mallory")
		op := c.operator(operatorToken)
		feed := func(since *timestamppb.Timestamp) []string {
			t.Helper()
			res, err := c.brokers(brokerToken).ListRevokedAPIKeys(ctx, connect.NewRequest(&sluicev1.ListRevokedAPIKeysRequest{Since: since}))
			require.NoError(t, err)
			return res.Msg.GetSuspendedTenantIds()
		}
		require.Empty(t, feed(nil))

		_, err := op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: a.tenantID, Status: ptr("suspended")}))
		require.NoError(t, err)
		_, err = c.topics(a.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		requireCode(t, connect.CodePermissionDenied, err, "tenant is suspended")
		_, err = c.auth().CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: a.apiKey}))
		requireCode(t, connect.CodePermissionDenied, err, "suspended")
		require.Equal(t, []string{a.tenantID}, feed(nil))
		require.Equal(t, []string{a.tenantID}, feed(timestamppb.New(time.Now().Add(time.Hour))), "the whole set, whatever since says")
		_, err = c.topics(b.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err, "another tenant is unaffected")

		_, err = op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: a.tenantID, Status: ptr("active")}))
		require.NoError(t, err)
		require.Empty(t, feed(nil), "a reinstated tenant leaves the feed")
		_, err = c.topics(a.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err, "the old token works again")
		_, err = c.auth().CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: a.apiKey}))
		require.NoError(t, err)
	})
}

// signupFrom signs up through a trusted proxy that says the client is at
// addr (X-Forwarded-For).
func (c *cluster) signupFrom(ctx context.Context, addr, name string) error {
	req := connect.NewRequest(&sluicev1.SignupRequest{Email: name + "@example.com", TenantName: name})
	if addr != "" {
		req.Header().Set("X-Forwarded-For", addr)
	}
	_, err := c.tenants("").Signup(ctx, req)
	return err
}

func (c *cluster) createTokenFrom(ctx context.Context, addr, apiKey string) error {
	req := connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: apiKey})
	req.Header().Set("X-Forwarded-For", addr)
	_, err := c.auth().CreateToken(ctx, req)
	return err
}

// requireRetryLater checks a per-client limit's answer: ResourceExhausted
// with a google.rpc.RetryInfo delay in (0, max], also in the message.
func requireRetryLater(t *testing.T, err error, maxDelay time.Duration, what string) {
	t.Helper()
	requireCode(t, connect.CodeResourceExhausted, err, "too many", "retry in")
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	var delay *durationpb.Duration
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if ri, ok := v.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay()
		}
	}
	require.NotNil(t, delay, "%s: a RetryInfo detail", what)
	require.Positive(t, delay.AsDuration(), what)
	require.LessOrEqual(t, delay.AsDuration(), maxDelay, what)
}

// TestControlPlaneClientLimits (issue 12, item 6): Signup and bad-key
// CreateToken calls are limited per client address (the TCP peer; behind
// --trusted-proxies the X-Forwarded-For client, IPv6 per /64), answered
// with ResourceExhausted and a retry delay, while other addresses and good
// keys are not slowed.
func TestControlPlaneClientLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := func(trusted ...string) func(*controlplane.Config) {
		return func(cfg *controlplane.Config) {
			cfg.ClientLimits.Signup = clientlimit.Limit{Burst: 3, Every: time.Hour}
			cfg.ClientLimits.TokenFailures = clientlimit.Limit{Burst: 3, Every: time.Hour}
			cfg.ClientLimits.TrustedProxies = trusted
		}
	}

	t.Run("peer address", func(t *testing.T) {
		t.Parallel()
		c := start(t, "sqlite:"+t.TempDir()+"/cp.db", limits())
		for i := range 3 {
			require.NoError(t, c.signupFrom(ctx, "", fmt.Sprintf("peer-%d", i)))
		}
		requireRetryLater(t, c.signupFrom(ctx, "", "peer-3"), time.Hour, "the fourth signup from one address")
		// Without trusted proxies X-Forwarded-For is the client's word: ignored.
		requireRetryLater(t, c.signupFrom(ctx, "198.51.100.1", "peer-4"), time.Hour, "a spoofed X-Forwarded-For")
		_, err := c.srv.Store().GetTenantByName(ctx, "peer-3")
		require.ErrorContains(t, err, "not found", "a refused signup creates nothing")
	})

	t.Run("behind a trusted proxy", func(t *testing.T) {
		t.Parallel()
		c := start(t, "sqlite:"+t.TempDir()+"/cp.db", limits("127.0.0.1/32", "::1/128"))
		for i := range 3 {
			require.NoError(t, c.signupFrom(ctx, "203.0.113.5", fmt.Sprintf("x-%d", i)))
		}
		requireRetryLater(t, c.signupFrom(ctx, "203.0.113.5", "x-3"), time.Hour, "the fourth signup from 203.0.113.5")
		// A client cannot escape by prepending an address of its choice.
		requireRetryLater(t, c.signupFrom(ctx, "192.0.2.99, 203.0.113.5", "x-4"), time.Hour, "a spoofed entry left of the proxy's")
		require.NoError(t, c.signupFrom(ctx, "198.51.100.7", "y-0"), "another address still signs up")
		// IPv6 is limited per /64.
		for i := range 3 {
			require.NoError(t, c.signupFrom(ctx, fmt.Sprintf("2001:db8:1:2::%x", i+1), fmt.Sprintf("v6-%d", i)))
		}
		requireRetryLater(t, c.signupFrom(ctx, "2001:db8:1:2:ffff::1", "v6-3"), time.Hour, "another address of the same /64")
		require.NoError(t, c.signupFrom(ctx, "2001:db8:1:3::1", "v6-other"), "the next /64")

		// CreateToken: bad keys count, good keys do not.
		good := c.signup(t, "keys")
		for range 10 {
			require.NoError(t, c.createTokenFrom(ctx, "203.0.113.9", good.apiKey), "good keys are never slowed")
		}
		bad := []string{"slk_0123456789abcdef_nope", "", good.apiKey[:len(good.apiKey)-1] + "x"}
		for _, k := range bad {
			err := c.createTokenFrom(ctx, "203.0.113.9", k)
			require.Contains(t, []connect.Code{connect.CodeUnauthenticated, connect.CodeInvalidArgument}, connect.CodeOf(err), "%v", err)
		}
		requireRetryLater(t, c.createTokenFrom(ctx, "203.0.113.9", "slk_0123456789abcdef_again"), time.Hour, "a fourth bad key")
		requireRetryLater(t, c.createTokenFrom(ctx, "203.0.113.9", good.apiKey), time.Hour,
			"while out of bad-key calls, a good key from that address is refused too (a guess cannot be tested)")
		require.NoError(t, c.createTokenFrom(ctx, "198.51.100.7", good.apiKey), "another address is not slowed")
	})

	t.Run("a broker speaking for its Kafka client", func(t *testing.T) {
		t.Parallel()
		c := start(t, "sqlite:"+t.TempDir()+"/cp.db", limits())
		good := c.signup(t, "kafka-keys")
		forClient := func(client, credential, apiKey string) error {
			req := connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: apiKey})
			req.Header().Set(api.ClientAddressHeader, client)
			if credential != "" {
				req.Header().Set("Authorization", "Bearer "+credential)
			}
			_, err := c.auth().CreateToken(ctx, req)
			return err
		}
		// The bad keys of one client behind the broker use up that
		// client's calls, not the broker's.
		for range 3 {
			require.Error(t, forClient("203.0.113.20", brokerToken, "slk_0123456789abcdef_nope"))
		}
		requireRetryLater(t, forClient("203.0.113.20", brokerToken, "slk_0123456789abcdef_nope"), time.Hour, "that client's fourth bad key")
		require.NoError(t, forClient("203.0.113.21", brokerToken, good.apiKey), "another client of the same broker is not slowed")
		// Without the broker credential the header is the caller's word:
		// the peer (loopback) is counted.
		for range 3 {
			require.Error(t, forClient("203.0.113.22", "", "slk_0123456789abcdef_nope"))
		}
		requireRetryLater(t, forClient("203.0.113.23", "", "slk_0123456789abcdef_nope"), time.Hour, "a spoofed client address without the broker credential")
		requireRetryLater(t, forClient("203.0.113.24", "not-the-broker-token", good.apiKey), time.Hour, "a wrong broker credential")
	})
}

// TestControlPlaneSignupTakenIsOneAnswer: a taken tenant name and a taken
// email get the same code and the same message (no account enumeration),
// and neither creates anything.
func TestControlPlaneSignupTakenIsOneAnswer(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		ctx := context.Background()
		c.signup(t, "olivia")
		signup := func(email, name string) error {
			_, err := c.tenants("").Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: email, TenantName: name}))
			return err
		}
		nameTaken := signup("someone-else@example.com", "olivia")
		emailTaken := signup("OLIVIA@example.com", "olivia-two")
		bothTaken := signup("olivia@example.com", "olivia")
		for _, err := range []error{nameTaken, emailTaken, bothTaken} {
			requireCode(t, connect.CodeAlreadyExists, err, "already registered")
			require.Equal(t, nameTaken.Error(), err.Error(), "one answer for a taken name and a taken email")
			require.NotContains(t, err.Error(), "email already")
			require.NotContains(t, err.Error(), "name already")
		}
		for _, name := range []string{"olivia-two"} {
			_, err := c.srv.Store().GetTenantByName(ctx, name)
			require.ErrorContains(t, err, "not found", "nothing created for %s", name)
		}
		tl, err := c.operator(operatorToken).ListTenants(ctx, connect.NewRequest(&sluicev1.ListTenantsRequest{}))
		require.NoError(t, err)
		require.Len(t, tl.Msg.GetTenants(), 1)
	})
}

// TestControlPlaneJWKSOfflineVerification verifies a token the way a broker
// will: offline, from the published JWKS.
func TestControlPlaneJWKSOfflineVerification(t *testing.T) {
	t.Parallel()
	c := start(t, "sqlite:"+t.TempDir()+"/cp.db")
	a := c.signup(t, "heidi")
	cache := tenants.NewJWKSCache(c.endpoint+controlplane.JWKSPath, c.hc, time.Minute, time.Second)
	v := tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice"}, cache)
	p, err := v.Verify(context.Background(), a.token)
	require.NoError(t, err)
	require.Equal(t, a.tenantID, p.TenantID)
	require.Equal(t, a.keyID, p.APIKeyID)
	require.ElementsMatch(t, tenants.AllScopes(), p.Scopes)

	v2 := tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "someone-else"}, cache)
	_, err = v2.Verify(context.Background(), a.token)
	require.True(t, errors.Is(err, tenants.ErrInvalidToken), "%v", err)
}

// TestControlPlaneHealthAndMetrics: metrics are served on the operator
// listener only; the API port, which tenants reach, answers 404 for them.
// Probes work on both.
func TestControlPlaneHealthAndMetrics(t *testing.T) {
	t.Parallel()
	c := start(t, "sqlite:"+t.TempDir()+"/cp.db")
	c.signup(t, "ivan")
	get := func(base, path string) (int, string) {
		res, err := c.hc.Get(base + path)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	for _, base := range []string{c.endpoint, c.metrics} {
		code, _ := get(base, "/healthz")
		require.Equal(t, 200, code, base)
		code, _ = get(base, "/readyz")
		require.Equal(t, 200, code, base)
	}
	code, body := get(c.metrics, "/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, `sluice_controlplane_rpc_requests_total{code="ok",procedure="/sluice.v1.TenantService/Signup"} 1`)
	require.Contains(t, body, `sluice_controlplane_rpc_duration_seconds_bucket{code="ok",procedure="/sluice.v1.AuthService/CreateToken"`)
	// SQLite's write queue: the signup's writes went through it.
	require.Regexp(t, `sluice_controlplane_store_write_queue_writes_total\{lane="normal"\} [1-9]`, body)
	require.Regexp(t, `sluice_controlplane_store_write_queue_waiting\{lane="urgent"\} \d+`, body)
	for _, path := range []string{"/metrics", "/metrics/", "/debug/pprof/", "/debug/vars"} {
		code, body := get(c.endpoint, path)
		require.Equal(t, http.StatusNotFound, code, "API port %s", path)
		require.NotContains(t, body, "sluice_", "API port %s", path)
	}
}

func ptr[T any](v T) *T { return &v }

// TestControlPlaneQuotaMessageReportsUsage: a topic refused for the
// partition limit says how many partitions the tenant really holds, also
// when the request alone is over the limit (it said "0 in use").
func TestControlPlaneQuotaMessageReportsUsage(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		c.registerBrokers(t, 1)
		ctx := context.Background()
		a := c.signup(t, "quota")
		tc := c.topics(a.token)
		_, err := tc.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 6, ReplicationFactor: 1}))
		require.NoError(t, err)
		_, err = tc.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "big", PartitionCount: 100, ReplicationFactor: 1}))
		requireCode(t, connect.CodeResourceExhausted, err, "partitions limit reached: the tenant may have 30 (free plan and overrides); 6 in use, this topic needs 100")
		_, err = tc.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "more", PartitionCount: 25, ReplicationFactor: 1}))
		requireCode(t, connect.CodeResourceExhausted, err, "partitions limit reached: the tenant may have 30 (free plan and overrides); 6 in use, this topic needs 25")
	})
}
