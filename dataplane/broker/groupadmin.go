package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// ListGroups asks every broker that coordinates groups (any broker
// forwards to all of them; with the no-forward header it answers for
// itself only).
func (s *groupService) ListGroups(ctx context.Context, req *connect.Request[sluicev1.ListGroupsRequest]) (*connect.Response[sluicev1.ListGroupsResponse], error) {
	tenantID, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	local := func() ([]*sluicev1.GroupSummary, error) {
		coords, err := s.b.localCoordinators(ctx)
		if err != nil {
			return nil, toConnect(err)
		}
		var out []*sluicev1.GroupSummary
		for _, c := range coords {
			out = append(out, c.Summaries(now, tenantID)...)
		}
		return out, nil
	}
	all, err := askCoordinators(ctx, s.b, req, offsetsTopic, errNoOffsetsTopic, "list groups", local,
		func(id int32) func(context.Context, *connect.Request[sluicev1.ListGroupsRequest]) (*connect.Response[sluicev1.ListGroupsResponse], error) {
			return s.b.peer(id).group.ListGroups
		},
		(*sluicev1.ListGroupsResponse).GetGroups, (*sluicev1.GroupSummary).GetGroup)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.ListGroupsResponse{Groups: all}), nil
}

func (s *groupService) DescribeGroup(ctx context.Context, req *connect.Request[sluicev1.DescribeGroupRequest]) (*connect.Response[sluicev1.DescribeGroupResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.DescribeGroup)
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	d, offsets, ok := c.Describe(now, tenantID, m.GetGroup())
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("group %q not found", m.GetGroup()))
	}
	res := &sluicev1.DescribeGroupResponse{Group: m.GetGroup(), State: string(d.State), GroupEpoch: d.GroupEpoch, Assignor: d.Assignor, Rebalances: d.Rebalances}
	if res.State == "" {
		res.State = "empty"
	}
	meta := s.b.metadata()
	owner := map[TopicPartitionKey]string{}
	topics := map[string]bool{}
	for _, md := range d.Members {
		res.Members = append(res.Members, &sluicev1.GroupMember{
			MemberId: md.MemberID, InstanceId: md.InstanceID, MemberEpoch: md.MemberEpoch, SubscribedTopics: md.Subscriptions,
			Assignment: toTopicPartitions(md.Assignment), Pending: toTopicPartitions(md.Pending), Revoking: toTopicPartitions(md.Revoking),
		})
		for t, ps := range md.Assignment {
			for _, p := range ps {
				owner[TopicPartitionKey{t, p}] = md.MemberID
			}
		}
		for t, ps := range md.Revoking {
			for _, p := range ps {
				owner[TopicPartitionKey{t, p}] = md.MemberID
			}
		}
		for _, t := range md.Subscriptions {
			topics[t] = true
		}
	}
	committed := map[TopicPartitionKey]coordinator.Committed{}
	for k, co := range offsets {
		if t, ok := meta.ByID[k.TopicID]; ok && t.TenantID == tenantID {
			topics[t.Name] = true
			committed[TopicPartitionKey{t.Name, k.Partition}] = co
		}
	}
	pendingOffsets := map[TopicPartitionKey][]*sluicev1.PendingOffset{}
	for pid, p := range c.PendingOffsets(tenantID, m.GetGroup()) {
		for k, co := range p {
			if t, ok := meta.ByID[k.TopicID]; ok && t.TenantID == tenantID {
				topics[t.Name] = true
				tk := TopicPartitionKey{t.Name, k.Partition}
				pendingOffsets[tk] = append(pendingOffsets[tk], &sluicev1.PendingOffset{ProducerId: pid, Offset: co.Offset.GetOffset()})
			}
		}
	}
	var lags []*sluicev1.PartitionLag
	var toFill []topicLag
	for name := range topics {
		t, ok := meta.Topic(tenantID, name)
		if !ok {
			continue
		}
		for _, tpm := range t.Partitions {
			k := TopicPartitionKey{name, tpm.Partition}
			pl := &sluicev1.PartitionLag{Topic: name, Partition: tpm.Partition, CommittedOffset: -1, MemberId: owner[k]}
			if co, ok := committed[k]; ok {
				pl.CommittedOffset = co.Offset.GetOffset()
			}
			pl.PendingOffsets = pendingOffsets[k]
			slices.SortFunc(pl.PendingOffsets, func(a, b *sluicev1.PendingOffset) int { return cmp.Compare(a.GetProducerId(), b.GetProducerId()) })
			lags = append(lags, pl)
			toFill = append(toFill, topicLag{topic: t, lag: pl})
		}
	}
	s.b.fillLags(ctx, clientCredentials(req.Header()), toFill, now)
	slices.SortFunc(lags, func(a, b *sluicev1.PartitionLag) int {
		if c := strings.Compare(a.GetTopic(), b.GetTopic()); c != 0 {
			return c
		}
		return int(a.GetPartition() - b.GetPartition())
	})
	res.Partitions = lags
	return connect.NewResponse(res), nil
}

// TopicPartitionKey names a partition by topic name.
type TopicPartitionKey struct {
	Topic     string
	Partition int32
}

// topicLag is one partition's lag row to fill in (Topic, Partition and
// CommittedOffset set; -1 when the group has none) with its topic.
type topicLag struct {
	topic *cluster.Topic
	lag   *sluicev1.PartitionLag
}

// fillLags asks each partition's leader for its log start, high watermark
// and last stable offset and, when the group lags, for the oldest record
// it has left to read (concurrently, at most 16 at a time). A partition
// whose leader does not answer keeps -1 values. DescribeGroup and the
// group lag metrics both compute lag here.
//
// Lag is what a read_committed consumer at the committed offset can still
// read (the broker does not know a group's isolation level; on a topic
// without transactions the LSO is the high watermark, so this is HW -
// committed): it ends at the last stable offset, so an open transaction's
// records count only once it commits, and it starts at the first record
// such a consumer would be given (batchTimeAt), so transaction markers and
// aborted transactions right after the committed offset are not counted:
// a group caught up to a commit marker has lag 0. Markers and aborted
// records after that first record are still counted (an upper bound: only
// a read of the whole range would tell them apart). A read_uncommitted
// group inside an open transaction, past the LSO, has lag 0.
func (b *Broker) fillLags(ctx context.Context, cred credentials, lags []topicLag, now time.Time) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, tl := range lags {
		t, pl := tl.topic, tl.lag
		if pl.GetPartition() < 0 || int(pl.GetPartition()) >= len(t.Partitions) {
			pl.HighWatermark, pl.LogStartOffset, pl.Lag = -1, -1, -1
			continue
		}
		pm := t.Partitions[pl.GetPartition()]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			off, err := b.listOffsets(ctx, cred, t, pm, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
			if err != nil {
				pl.HighWatermark, pl.LogStartOffset, pl.Lag = -1, -1, -1
				return
			}
			pl.HighWatermark, pl.LogStartOffset, pl.PartitionBytes = off.GetHighWatermark(), off.GetLogStartOffset(), off.GetSizeBytes()
			lso := min(max(off.GetLastStableOffset(), pl.GetLogStartOffset()), pl.GetHighWatermark())
			from := pl.GetCommittedOffset()
			if from < 0 || from < pl.GetLogStartOffset() {
				from = pl.GetLogStartOffset()
			}
			pl.Lag = max(lso-from, 0)
			if pl.GetLag() == 0 {
				return
			}
			ts, at, err := b.batchTimeAt(ctx, cred, t, pm, from, lso)
			if err != nil {
				return // the lag from the committed offset, its age unknown
			}
			pl.Lag = max(lso-at, 0)
			if pl.GetLag() > 0 && ts > 0 {
				pl.LagSeconds = max(now.Sub(time.UnixMilli(ts)).Seconds(), 0)
			}
		})
	}
	wg.Wait()
}

// askCoordinators answers a list request that every coordinator of an
// internal topic (the offsets or the transaction-state topic) answers for
// its own partitions: with the no-forward header, this broker's own list
// (local); otherwise the lists of every broker leading a partition of it,
// this one's from local and the others' through remote (forwarded with
// the client's credential), sorted by key and without the duplicates a
// leadership move can give. A partition without a leader, or a broker
// that fails, makes it Unavailable: the list would be incomplete.
func askCoordinators[Req, Res, T any](ctx context.Context, b *Broker, req *connect.Request[Req], topic string, errNoTopic error, what string,
	local func() ([]T, error),
	remote func(id int32) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	items func(*Res) []T, key func(T) string,
) ([]T, error) {
	if req.Header().Get(NoForwardHeader) == "1" {
		return local()
	}
	t, ok := b.metadata().Topic(systemTenantID, topic)
	if !ok {
		return nil, errNoTopic
	}
	leaders := map[int32]bool{}
	for _, pm := range t.Partitions {
		if pm.Leader < 0 {
			return nil, toConnect(b.notLeader(pm)) // a coordinator is offline: the list would be incomplete
		}
		leaders[pm.Leader] = true
	}
	var (
		mu   sync.Mutex
		all  []T
		errs []error
		wg   sync.WaitGroup
	)
	for id := range leaders {
		wg.Go(func() {
			var out []T
			var err error
			if id == b.cfg.ID {
				out, err = local()
			} else {
				var res *connect.Response[Res]
				res, err = forward(ctx, b, cluster.Partition{Leader: id}, req, remote(id))
				if err == nil {
					out = items(res.Msg)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, out...)
			if err != nil {
				errs = append(errs, fmt.Errorf("broker %d: %w", id, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s: %w", what, errors.Join(errs...)))
	}
	slices.SortFunc(all, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	// During a leadership move two brokers may both answer for a key.
	return slices.CompactFunc(all, func(a, b T) bool { return key(a) == key(b) }), nil
}

// credentials are what this broker presents when it asks a partition's
// leader (itself included) for offsets or records of a tenant's topic.
type credentials struct {
	// authorization is a client's Authorization header, forwarded: the
	// leader checks the client's own token and scopes.
	authorization string
	// broker: this broker's own credential, acting for the topic's tenant,
	// for background work no client asked for (the group lag metrics).
	// Leaders accept it for ListOffsets and Fetch only (see rules).
	broker bool
}

// clientCredentials forwards the credentials of the client request h.
func clientCredentials(h http.Header) credentials {
	return credentials{authorization: h.Get("Authorization")}
}

// brokerCredentials act as this broker on behalf of a topic's tenant.
var brokerCredentials = credentials{broker: true}

// prepare sets the headers of a request to t's leader and returns the
// context to call this broker's own handler with: it carries the principal
// the auth interceptor would have set (a client's is already in ctx).
func (b *Broker) prepare(ctx context.Context, cred credentials, t *cluster.Topic, h http.Header) context.Context {
	h.Set(NoForwardHeader, "1")
	if !cred.broker {
		h.Set("Authorization", cred.authorization)
		return ctx
	}
	h.Set("Authorization", "Bearer "+b.cfg.BrokerToken)
	h.Set(actForTenantHeader, t.TenantID)
	return tenants.WithPrincipal(ctx, tenants.Principal{Kind: tenants.PrincipalBroker, BrokerID: b.cfg.ID, TenantID: t.TenantID})
}

// listOffsets asks a partition's leader (itself, when it leads) for an
// offset, with cred.
func (b *Broker) listOffsets(ctx context.Context, cred credentials, t *cluster.Topic, pm cluster.Partition, spec sluicev1.OffsetSpec, ts int64) (*sluicev1.ListOffsetsResponse, error) {
	if pm.Leader < 0 {
		return nil, toConnect(b.notLeader(pm))
	}
	req := connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: t.Name, Partition: pm.Partition, Spec: spec, TimestampMs: ts})
	ctx = b.prepare(ctx, cred, t, req.Header())
	var res *connect.Response[sluicev1.ListOffsetsResponse]
	var err error
	if pm.Leader == b.cfg.ID {
		res, err = (&recordService{b}).ListOffsets(ctx, req)
	} else {
		res, err = b.recordClient(pm.Leader).ListOffsets(ctx, req)
	}
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("offsets of topic %q partition %d: %s", t.Name, pm.Partition, ce.Message()))
		}
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("offsets of topic %q partition %d: %w", t.Name, pm.Partition, err))
	}
	return res.Msg, nil
}

// lagScanFetches bounds the fetches batchTimeAt makes past batches a
// read_committed consumer would not be given; lagScanBytes is each one's
// max_bytes after the first (markers are about 70 bytes: one fetch passes
// hundreds).
const (
	lagScanFetches = 8
	lagScanBytes   = 64 << 10
)

// batchTimeAt finds the oldest record a read_committed consumer at offset
// would be given below lso: it returns the first timestamp of its batch
// (the append time of the oldest unconsumed record, to within a batch) and
// its offset (offset itself when the batch holds it). The fetches skip
// transaction markers and aborted batches (their next_offset passes
// them): when they reach lso, it returns ts 0 and at = lso (nothing left
// to read). After lagScanFetches fetches without a record it returns ts 0
// and where it got to. When the leader refuses the read_committed fetch
// (a tiered segment without an aborted-transaction index), it reads the
// batch at that offset read_uncommitted: an aborted batch's age then
// counts, which errs toward an early retention alert, not a missed one.
func (b *Broker) batchTimeAt(ctx context.Context, cred credentials, t *cluster.Topic, pm cluster.Partition, offset, lso int64) (ts, at int64, err error) {
	fetch := func(offset int64, maxBytes int32, iso sluicev1.IsolationLevel) (*sluicev1.FetchResponse, error) {
		req := connect.NewRequest(&sluicev1.FetchRequest{Topic: t.Name, Partition: pm.Partition, Offset: offset, MaxBytes: maxBytes, RawBatches: true, IsolationLevel: iso})
		ctx := b.prepare(ctx, cred, t, req.Header())
		var res *connect.Response[sluicev1.FetchResponse]
		var err error
		if pm.Leader == b.cfg.ID {
			res, err = (&recordService{b}).Fetch(ctx, req)
		} else {
			res, err = b.recordClient(pm.Leader).Fetch(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	first := func(res *sluicev1.FetchResponse) (ts, at int64, ok bool, err error) {
		data := res.GetBatches().GetData()
		if len(data) == 0 {
			return 0, 0, false, nil
		}
		batch, _, err := record.ReadBatch(data)
		if err != nil {
			return 0, offset, false, err
		}
		h := batch.Header()
		return h.FirstTimestamp, max(offset, h.BaseOffset), true, nil
	}
	maxBytes := int32(1) // at least the batch at offset: the usual answer
	for range lagScanFetches {
		res, err := fetch(offset, maxBytes, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
		if err != nil && ctx.Err() == nil {
			if res, err2 := fetch(offset, 1, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED); err2 == nil {
				if ts, at, ok, err := first(res); ok || err != nil {
					return ts, at, err
				}
			}
		}
		if err != nil {
			return 0, offset, err
		}
		if ts, at, ok, err := first(res); ok || err != nil {
			return ts, at, err
		}
		next := res.GetNextOffset()
		if next <= offset {
			return 0, offset, nil // nothing read: at the end, or the leader moved
		}
		if offset = next; offset >= lso {
			return 0, lso, nil
		}
		maxBytes = lagScanBytes
	}
	return 0, offset, nil
}

func (s *groupService) DeleteGroup(ctx context.Context, req *connect.Request[sluicev1.DeleteGroupRequest]) (*connect.Response[sluicev1.DeleteGroupResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.DeleteGroup)
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if _, _, ok := c.Describe(now, tenantID, m.GetGroup()); !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("group %q not found", m.GetGroup()))
	}
	if c.Active(now, tenantID, m.GetGroup()) {
		return nil, groupError(fmt.Errorf("group %q %w: stop them first", m.GetGroup(), coordinator.ErrGroupActive))
	}
	if err := c.DeleteGroup(ctx, tenantID, m.GetGroup()); err != nil {
		return nil, offsetsError(err)
	}
	return connect.NewResponse(&sluicev1.DeleteGroupResponse{}), nil
}

func (s *groupService) ResetOffsets(ctx context.Context, req *connect.Request[sluicev1.ResetOffsetsRequest]) (*connect.Response[sluicev1.ResetOffsetsResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.ResetOffsets)
	}
	if err != nil {
		return nil, err
	}
	meta := s.b.metadata()
	t, ok := meta.Topic(tenantID, m.GetTopic())
	if !ok {
		return nil, unknownTopic(meta, m.GetTopic())
	}
	if m.GetSpec() < sluicev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED || m.GetSpec() > sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("spec: unknown value %d", m.GetSpec()))
	}
	if m.GetSpec() == sluicev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED && m.GetOffset() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("offset: must not be negative; got %d", m.GetOffset()))
	}
	parts := m.GetPartitions()
	if len(parts) == 0 {
		for i := range t.Partitions {
			parts = append(parts, int32(i))
		}
	}
	for _, p := range parts {
		if p < 0 || int(p) >= len(t.Partitions) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("partitions: topic %q has partitions 0..%d; got %d", t.Name, len(t.Partitions)-1, p))
		}
	}
	if !m.GetForce() && c.Active(time.Now(), tenantID, m.GetGroup()) {
		return nil, groupError(fmt.Errorf("group %q %w: stop them first, or force (members keep consuming from their own positions until their partitions move)", m.GetGroup(), coordinator.ErrGroupActive))
	}
	cred := clientCredentials(req.Header())
	now := time.Now()
	res := &sluicev1.ResetOffsetsResponse{}
	var commits []coordinator.OffsetCommit
	for _, p := range slices.Compact(slices.Sorted(slices.Values(parts))) {
		pm := t.Partitions[p]
		bounds, err := s.b.listOffsets(ctx, cred, t, pm, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
		if err != nil {
			return nil, err
		}
		var off int64
		switch m.GetSpec() {
		case sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
			off = bounds.GetLogStartOffset()
		case sluicev1.OffsetSpec_OFFSET_SPEC_LATEST:
			off = bounds.GetHighWatermark()
		case sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
			at, err := s.b.listOffsets(ctx, cred, t, pm, sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, m.GetTimestampMs())
			if err != nil {
				return nil, err
			}
			if off = at.GetOffset(); off < 0 {
				off = bounds.GetHighWatermark()
			}
		default:
			off = min(max(m.GetOffset(), bounds.GetLogStartOffset()), bounds.GetHighWatermark())
		}
		po := &sluicev1.PartitionOffset{Topic: t.Name, Partition: p, Offset: off, LeaderEpoch: -1, Metadata: "reset"}
		res.Offsets = append(res.Offsets, po)
		commits = append(commits, coordinator.OffsetCommit{TopicID: t.ID, Offset: po})
	}
	if err := c.CommitOffsets(ctx, now, tenantID, m.GetGroup(), commits); err != nil {
		return nil, offsetsError(err)
	}
	return connect.NewResponse(res), nil
}
