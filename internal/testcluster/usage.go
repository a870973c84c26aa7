package testcluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// SetTenantOverrides is the operator replacing a tenant's limit overrides
// (OperatorService.UpdateTenant; an empty message clears them). The
// brokers enforce new rate limits once the control plane has answered
// their next quota exchange.
func (c *Cluster) SetTenantOverrides(ctx context.Context, tenantID string, o *sluicev1.LimitOverrides) error {
	if o == nil {
		o = &sluicev1.LimitOverrides{}
	}
	_, err := c.operator().UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: tenantID, Overrides: o}))
	if err == nil {
		c.mark("tenant %s overrides %v", tenantID, o)
	}
	return err
}

// NewTenant signs a tenant up, has the operator set its limit overrides
// (nil: none) before the tenant sends anything to a broker, so that the
// control plane's first quota exchange for it already divides the
// overridden limits, and returns a client with no topic yet (NewTopic).
func (c *Cluster) NewTenant(t testing.TB, tenant string, o *sluicev1.LimitOverrides) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp := c.ControlPlane()
	su, err := sluicev1connect.NewTenantServiceClient(c.hc, cp, connect.WithGRPC()).Signup(ctx,
		connect.NewRequest(&sluicev1.SignupRequest{Email: tenant + "@e2e.example", TenantName: tenant}))
	if err != nil {
		t.Fatalf("signup: %v", err)
	}
	if o != nil {
		if err := c.SetTenantOverrides(ctx, su.Msg.GetTenant().GetId(), o); err != nil {
			t.Fatalf("overrides: %v", err)
		}
	}
	tok, err := sluicev1connect.NewAuthServiceClient(c.hc, cp, connect.WithGRPC()).CreateToken(ctx,
		connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: su.Msg.GetApiKeySecret()}))
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	return &Client{
		c: c, TenantID: su.Msg.GetTenant().GetId(), APIKey: su.Msg.GetApiKeySecret(), token: tok.Msg.GetToken(),
		leaders: map[int32]int32{}, sent: new(atomic.Int64),
	}
}

// NewTopic creates another topic of the client's tenant (replication
// factor 3, or the cluster's size) and returns a client for it with the
// same credentials, once every broker knows every partition's leader.
func (cl *Client) NewTopic(t testing.TB, topic string, partitions int32, cfg *sluicev1.TopicConfig) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := cl.c
	rf := min(int32(3), int32(len(c.brokers)))
	created, err := sluicev1connect.NewTopicServiceClient(c.hc, c.ControlPlane(), connect.WithGRPC(), bearer(cl.token)).CreateTopic(ctx,
		connect.NewRequest(&sluicev1.CreateTopicRequest{Name: topic, PartitionCount: partitions, ReplicationFactor: rf, Config: cfg}))
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	n := &Client{
		c: c, TenantID: cl.TenantID, APIKey: cl.APIKey, token: cl.token,
		Topic: topic, TopicID: created.Msg.GetTopic().GetId(), leaders: map[int32]int32{}, sent: cl.sent,
	}
	for _, p := range created.Msg.GetPartitions() {
		n.leaders[p.GetPartition()] = p.GetLeader()
	}
	testenv.Wait(t, 30*time.Second, "topic assignments on every broker", func() error {
		for _, id := range c.BrokerIDs() {
			md, err := n.Metadata(ctx, id)
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
	return n
}

// RawFetch reads raw batches from offset through a given broker (no
// forwarding): the batches' bytes as the broker answered them (without
// transaction markers), the high watermark and the next offset.
func (cl *Client) RawFetch(ctx context.Context, broker, partition int32, offset int64, maxBytes int32) (data []byte, hw, next int64, err error) {
	req := connect.NewRequest(&sluicev1.FetchRequest{Topic: cl.Topic, Partition: partition, Offset: offset, MaxBytes: maxBytes, RawBatches: true})
	req.Header().Set(noForward, "1")
	// A read the client gives up on is not billed (records.Service.Fetch),
	// but one that times out just after the broker answered would be: a
	// long deadline keeps that rare with every core busy.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := cl.records(broker).Fetch(cctx, req)
	cl.observe(partition, err)
	if err != nil {
		return nil, 0, 0, err
	}
	return res.Msg.GetBatches().GetData(), res.Msg.GetHighWatermark(), res.Msg.GetNextOffset(), nil
}

// LogSize is what one partition's log holds below its high watermark.
type LogSize struct {
	// HW is the high watermark the read went up to (the first answer's).
	HW int64
	// Bytes is the sum of the sizes of the data batches (whole encoded
	// batches, length prefix included; control batches excluded):
	// what billing counts as ingress (IngressRange.bytes).
	Bytes int64
	// Batches and Records count the data batches and their records.
	Batches, Records int64
	// Fetched is every byte the broker answered to the reads, retries
	// included: what a broker may meter as the tenant's egress for them.
	Fetched int64
}

// LogBytes reads a partition from offset 0 to its high watermark with raw
// fetches through the current leader, retrying (with a deadline) across
// leader moves, and sums its data batches' sizes. A batch is counted once
// however the reads overlap.
func (cl *Client) LogBytes(ctx context.Context, partition int32) (LogSize, error) {
	var s LogSize
	s.HW = -1
	var next int64
	err := testenv.Retry(60*time.Second, func() error {
		for s.HW < 0 || next < s.HW {
			data, hw, _, err := cl.RawFetch(ctx, cl.route(ctx, partition), partition, next, 1<<20)
			if err != nil {
				return err
			}
			s.Fetched += int64(len(data))
			if s.HW < 0 {
				s.HW = hw
			}
			if next >= s.HW {
				return nil
			}
			if len(data) == 0 {
				// Markers only (they are not returned) or nothing: the next
				// offset passes them.
				return fmt.Errorf("fetch at %d below HW %d returned no batches", next, s.HW)
			}
			for rest := data; len(rest) > 0; {
				b, r, err := record.NextChecked(rest)
				if err != nil {
					return testenv.Permanent(fmt.Errorf("partition %d at %d: %w", partition, next, err))
				}
				rest = r
				h := b.Header()
				if h.BaseOffset < next || h.BaseOffset >= s.HW {
					continue // read before, or above the HW we read up to
				}
				if h.BaseOffset != next {
					return testenv.Permanent(fmt.Errorf("partition %d: batch at %d after offset %d: a gap", partition, h.BaseOffset, next))
				}
				next = h.LastOffset() + 1
				if h.Attributes.Control() {
					continue
				}
				s.Bytes += int64(len(b))
				s.Batches++
				s.Records += int64(h.RecordCount)
			}
		}
		return nil
	})
	return s, err
}

// Usage answers the tenant's metered usage totals (BillingService.GetUsage
// by hour over the last day and the next hour) per dimension.
func (cl *Client) Usage(ctx context.Context) (map[sluicev1.UsageDimension]int64, error) {
	now := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := sluicev1connect.NewBillingServiceClient(cl.c.hc, cl.c.ControlPlane(), connect.WithGRPC(), bearer(cl.token)).GetUsage(cctx,
		connect.NewRequest(&sluicev1.GetUsageRequest{
			StartTime:   timestamppb.New(now.Add(-24 * time.Hour)),
			EndTime:     timestamppb.New(now.Add(time.Hour)),
			Granularity: sluicev1.UsageGranularity_USAGE_GRANULARITY_HOUR,
		}))
	if err != nil {
		return nil, err
	}
	out := map[sluicev1.UsageDimension]int64{}
	for _, tot := range res.Msg.GetTotals() {
		out[tot.GetDimension()] += tot.GetAmount()
	}
	if len(out) == 0 && len(res.Msg.GetBuckets()) > 0 {
		return nil, errors.New("GetUsage answered buckets without totals")
	}
	return out, nil
}

// Operator is an OperatorService client with the cluster's operator
// credential, for calls the helpers here do not wrap.
func (c *Cluster) Operator() sluicev1connect.OperatorServiceClient { return c.operator() }
