package testcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// noForward is the header a routing client sends so that a broker answers
// NotLeader instead of forwarding (broker.NoForwardHeader).
const noForward = "Sluice-No-Forward"

// Client is one tenant's routing client for one topic: it sends every
// request to the broker it believes leads the partition, marked "no
// forward", follows NotLeader details, and after other errors refreshes its
// view of the leaders from every broker (the newest leader epoch wins). It
// dials brokers at their listen addresses, bypassing proxies.
type Client struct {
	c        *Cluster
	TenantID string
	// APIKey is the tenant's API key (for SDK clients).
	APIKey  string
	token   string
	Topic   string
	TopicID string

	mu      sync.Mutex
	leaders map[int32]int32 // partition → broker believed to lead it
	stale   bool
	// sent counts the requests sent to brokers (see Sent); shared by the
	// clients NewTopic makes.
	sent *atomic.Int64
	// waitThrottle: a rate refusal is waited out and the request sent
	// again, as the SDK does (NewClient's tenants, which these tests do not
	// throttle on purpose); NewTenant's clients see every refusal.
	waitThrottle bool
}

// NewClient signs a tenant up, mints a token, creates a topic with
// replication factor 3 (or the cluster's size, if smaller) and minISR, and
// returns a client for it.
func (c *Cluster) NewClient(t testing.TB, tenant, topic string, partitions, minISR int32) *Client {
	t.Helper()
	return c.NewClientWithConfig(t, tenant, topic, partitions, &sluicev1.TopicConfig{MinInsyncReplicas: &minISR})
}

// NewClientWithConfig is NewClient with the topic created with cfg (unset
// fields take the control plane's defaults).
func (c *Cluster) NewClientWithConfig(t testing.TB, tenant, topic string, partitions int32, cfg *sluicev1.TopicConfig) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp := c.ControlPlane()
	su, err := sluicev1connect.NewTenantServiceClient(c.hc, cp, connect.WithGRPC()).Signup(ctx,
		connect.NewRequest(&sluicev1.SignupRequest{Email: tenant + "@e2e.example", TenantName: tenant}))
	if err != nil {
		t.Fatalf("signup: %v", err)
	}
	// On the pro plan, so that the faults and workloads these tests drive
	// stay below the tenant's rate quotas: a free-plan tenant's 10 MiB/s of
	// fetches is less than a test reading a tiered partition back asks for.
	// Its requests still wait out a rate refusal (waitThrottle): reads that
	// move to another broker meet that broker's small allotment until its
	// next quota exchange. Set before the tenant sends anything to a
	// broker, so the control plane's first quota exchange for it already
	// divides the pro limits. Quota tests use NewTenant, which keeps the
	// free plan and sees every refusal.
	pro := tenants.PlanPro
	if _, err := c.operator().UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: su.Msg.GetTenant().GetId(), Plan: &pro})); err != nil {
		t.Fatalf("plan: %v", err)
	}
	tok, err := sluicev1connect.NewAuthServiceClient(c.hc, cp, connect.WithGRPC()).CreateToken(ctx,
		connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: su.Msg.GetApiKeySecret()}))
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	rf := min(int32(3), int32(len(c.brokers)))
	created, err := sluicev1connect.NewTopicServiceClient(c.hc, cp, connect.WithGRPC(), bearer(tok.Msg.GetToken())).CreateTopic(ctx,
		connect.NewRequest(&sluicev1.CreateTopicRequest{
			Name: topic, PartitionCount: partitions, ReplicationFactor: rf,
			Config: cfg,
		}))
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	cl := &Client{
		c: c, TenantID: su.Msg.GetTenant().GetId(), APIKey: su.Msg.GetApiKeySecret(), token: tok.Msg.GetToken(),
		Topic: topic, TopicID: created.Msg.GetTopic().GetId(), leaders: map[int32]int32{},
		sent: new(atomic.Int64), waitThrottle: true,
	}
	for _, p := range created.Msg.GetPartitions() {
		cl.leaders[p.GetPartition()] = p.GetLeader()
	}
	// Ready when every broker knows every partition's leader.
	testenv.Wait(t, 30*time.Second, "topic assignments on every broker", func() error {
		for _, id := range c.BrokerIDs() {
			md, err := cl.Metadata(ctx, id)
			if err != nil {
				return err
			}
			if len(md) != int(partitions) {
				return fmt.Errorf("broker %d knows %d partitions", id, len(md))
			}
			for _, p := range md {
				if p.Leader < 0 || len(p.ISR) != int(rf) {
					return fmt.Errorf("broker %d: partition %d leader %d isr %v", id, p.Partition, p.Leader, p.ISR)
				}
			}
		}
		return nil
	})
	return cl
}

// Token is the tenant's bearer token, for control-plane services the
// helpers here do not wrap.
func (cl *Client) Token() string { return cl.token }

func (cl *Client) records(id int32) sluicev1connect.RecordServiceClient {
	return sluicev1connect.NewRecordServiceClient(cl.c.hc, cl.c.URL(cl.c.Broker(id).ListenAddr), connect.WithGRPC(), bearer(cl.token), cl.counting())
}

// counting counts every request a RecordService client sends and, for a
// client that waits out throttling, sends a request refused for a rate
// quota again after the delay the broker asked for.
func (cl *Client) counting() connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			for {
				cl.sent.Add(1)
				res, err := next(ctx, req)
				d, ok := retryDelay(err)
				if !ok || !cl.waitThrottle {
					return res, err
				}
				select {
				case <-ctx.Done():
					return res, err
				case <-time.After(d):
				}
			}
		}
	}))
}

// retryDelay is the google.rpc.RetryInfo delay of a ResourceExhausted
// refusal (a rate quota's).
func retryDelay(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		return 0, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return max(ri.GetRetryDelay().AsDuration(), time.Millisecond), true
			}
		}
	}
	return 0, false
}

// Sent is how many requests this client (and the clients of the tenant's
// other topics NewTopic made) sent to brokers, whatever their outcome: an
// upper bound of the requests brokers can meter for them.
func (cl *Client) Sent() int64 { return cl.sent.Load() }

// Records is a RecordService client of broker id with the tenant's token
// and opts, for requests the helpers here do not make. Set the
// Sluice-No-Forward header (NoForward) on a request that must be answered
// by that broker.
func (cl *Client) Records(id int32, opts ...connect.ClientOption) sluicev1connect.RecordServiceClient {
	opts = append([]connect.ClientOption{connect.WithGRPC(), bearer(cl.token), cl.counting()}, opts...)
	return sluicev1connect.NewRecordServiceClient(cl.c.hc, cl.c.URL(cl.c.Broker(id).ListenAddr), opts...)
}

// NoForward marks a request so that the broker answers it itself (or
// NotLeader) instead of forwarding it to the partition's leader.
func NoForward(h http.Header) { h.Set(noForward, "1") }

// PartitionInfo is one partition as a broker's metadata shows it.
type PartitionInfo struct {
	Partition   int32
	Leader      int32
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
}

// Metadata asks one broker for the topic's partitions.
func (cl *Client) Metadata(ctx context.Context, broker int32) ([]PartitionInfo, error) {
	res, err := cl.records(broker).GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{cl.Topic}}))
	if err != nil {
		return nil, fmt.Errorf("metadata from broker %d: %w", broker, err)
	}
	var out []PartitionInfo
	for _, t := range res.Msg.GetTopics() {
		for _, p := range t.GetPartitions() {
			isr := slices.Clone(p.GetIsr())
			slices.Sort(isr)
			out = append(out, PartitionInfo{Partition: p.GetPartition(), Leader: p.GetLeader(), LeaderEpoch: p.GetLeaderEpoch(), Replicas: p.GetReplicas(), ISR: isr})
		}
	}
	return out, nil
}

// NewestMetadata asks every running broker and keeps, per partition, the
// answer with the highest leader epoch. Brokers that do not answer within
// a second are skipped.
func (cl *Client) NewestMetadata(ctx context.Context) map[int32]PartitionInfo {
	ids := cl.c.BrokerIDs()
	answers := make([][]PartitionInfo, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			answers[i], _ = cl.Metadata(cctx, id)
		})
	}
	wg.Wait()
	best := map[int32]PartitionInfo{}
	for _, a := range answers {
		for _, p := range a {
			if cur, ok := best[p.Partition]; !ok || p.LeaderEpoch > cur.LeaderEpoch {
				best[p.Partition] = p
			}
		}
	}
	return best
}

// route returns the broker to send a partition's request to.
func (cl *Client) route(ctx context.Context, partition int32) int32 {
	cl.mu.Lock()
	stale := cl.stale
	cl.stale = false
	cl.mu.Unlock()
	if stale {
		md := cl.NewestMetadata(ctx)
		cl.mu.Lock()
		for p, info := range md {
			cl.leaders[p] = info.Leader
		}
		cl.mu.Unlock()
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if l, ok := cl.leaders[partition]; ok && l >= 0 {
		return l
	}
	ids := cl.c.BrokerIDs()
	return ids[rand.IntN(len(ids))]
}

// observe updates the routing after an error.
func (cl *Client) observe(partition int32, err error) {
	if err == nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if nl := NotLeaderOf(err); nl != nil && nl.GetLeaderId() >= 0 {
		cl.leaders[partition] = nl.GetLeaderId()
		return
	}
	cl.stale = true
}

// ProduceResult is the outcome of one produce request.
type ProduceResult struct {
	Broker int32 // the broker the request went to
	Base   int64 // base offset when acknowledged
	Err    error
}

// Produce sends one request with values as records, once, to the broker
// believed to lead the partition. reqTimeout is the broker's timeout_ms;
// the call itself gets two more seconds.
func (cl *Client) Produce(ctx context.Context, partition int32, values []string, acks sluicev1.Acks, reqTimeout time.Duration) ProduceResult {
	broker := cl.route(ctx, partition)
	return cl.ProduceTo(ctx, broker, partition, values, acks, reqTimeout)
}

// ProduceTo is Produce to a given broker.
func (cl *Client) ProduceTo(ctx context.Context, broker, partition int32, values []string, acks sluicev1.Acks, reqTimeout time.Duration) ProduceResult {
	recs := make([]*sluicev1.Record, len(values))
	for i, v := range values {
		recs[i] = &sluicev1.Record{Value: []byte(v)}
	}
	req := connect.NewRequest(&sluicev1.ProduceRequest{
		Topic: cl.Topic, Partition: partition, Acks: acks, TimeoutMs: reqTimeout.Milliseconds(),
		Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: recs}},
	})
	req.Header().Set(noForward, "1")
	cctx, cancel := context.WithTimeout(ctx, reqTimeout+2*time.Second)
	defer cancel()
	res, err := cl.records(broker).Produce(cctx, req)
	cl.observe(partition, err)
	if err != nil {
		return ProduceResult{Broker: broker, Err: err}
	}
	return ProduceResult{Broker: broker, Base: res.Msg.GetBaseOffset()}
}

// Record is one record as read from a partition.
type Record struct {
	Offset      int64
	Value       string
	LeaderEpoch int32
}

// FetchResult is one fetch's records and the high watermark.
type FetchResult struct {
	Broker  int32
	Records []Record
	HW      int64
	Next    int64
}

// Fetch reads from offset through the broker believed to lead.
func (cl *Client) Fetch(ctx context.Context, partition int32, offset int64, maxWait time.Duration) (FetchResult, error) {
	return cl.FetchFrom(ctx, cl.route(ctx, partition), partition, offset, maxWait)
}

// FetchFrom reads from offset through a given broker (no forwarding).
func (cl *Client) FetchFrom(ctx context.Context, broker, partition int32, offset int64, maxWait time.Duration) (FetchResult, error) {
	req := connect.NewRequest(&sluicev1.FetchRequest{Topic: cl.Topic, Partition: partition, Offset: offset, MaxBytes: 256 << 10, MaxWaitMs: maxWait.Milliseconds()})
	req.Header().Set(noForward, "1")
	cctx, cancel := context.WithTimeout(ctx, maxWait+3*time.Second)
	defer cancel()
	res, err := cl.records(broker).Fetch(cctx, req)
	cl.observe(partition, err)
	if err != nil {
		return FetchResult{Broker: broker}, err
	}
	out := FetchResult{Broker: broker, HW: res.Msg.GetHighWatermark(), Next: res.Msg.GetNextOffset()}
	for _, r := range res.Msg.GetRecords() {
		out.Records = append(out.Records, Record{Offset: r.GetOffset(), Value: string(r.GetValue()), LeaderEpoch: r.GetLeaderEpoch()})
	}
	return out, nil
}

// ReadAll reads a partition from offset 0 to its high watermark through
// the current leader, retrying (with a deadline) across leader moves.
func (cl *Client) ReadAll(ctx context.Context, partition int32) ([]Record, error) {
	var out []Record
	var hw int64 = -1
	err := testenv.Retry(60*time.Second, func() error {
		for {
			off := int64(0)
			if len(out) > 0 {
				off = out[len(out)-1].Offset + 1
			}
			if hw >= 0 && off >= hw {
				return nil
			}
			res, err := cl.Fetch(ctx, partition, off, 0)
			if err != nil {
				return err
			}
			if hw < 0 {
				hw = res.HW // read up to the HW seen at the start
			}
			if len(res.Records) == 0 {
				if off >= hw {
					return nil
				}
				return fmt.Errorf("fetch at %d below HW %d returned nothing", off, hw)
			}
			for _, r := range res.Records {
				if r.Offset < hw {
					out = append(out, r)
				}
			}
		}
	})
	return out, err
}

// NotLeaderOf returns the NotLeader detail of a Connect error, or nil.
func NotLeaderOf(err error) *sluicev1.NotLeader {
	nl, _ := client.ErrorDetail[*sluicev1.NotLeader](err)
	return nl
}

// NotEnoughReplicasOf returns the NotEnoughReplicas detail of a Connect
// error, or nil.
func NotEnoughReplicasOf(err error) *sluicev1.NotEnoughReplicas {
	ner, _ := client.ErrorDetail[*sluicev1.NotEnoughReplicas](err)
	return ner
}

// Classify says what a produce error means for the records: Failed when the
// broker refused before appending (the records are not in the log), and
// Indefinite otherwise (they may or may not be committed).
func Classify(err error) Outcome {
	if err == nil {
		return Acked
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return Indefinite
	}
	switch ce.Code() {
	case connect.CodeFailedPrecondition, connect.CodeInvalidArgument, connect.CodeNotFound,
		connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return Failed
	case connect.CodeUnavailable:
		// An offline partition (NotLeader with leader -1) and a named
		// leader not leading yet (NotLeader naming itself) are refused
		// before any append; any other Unavailable may follow an append.
		if NotLeaderOf(err) != nil {
			return Failed
		}
	}
	return Indefinite
}
