package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicemq/sluice/controlplane/placement"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

type topicService struct{ *API }

func (s *topicService) CreateTopic(ctx context.Context, req *connect.Request[sluicev1.CreateTopicRequest]) (*connect.Response[sluicev1.CreateTopicResponse], error) {
	t, limits, err := s.topicTenant(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	n := m.GetPartitionCount()
	if err := validPartitionCount(n, ""); err != nil {
		return nil, err
	}
	rf := m.GetReplicationFactor()
	if rf == 0 {
		rf = s.cfg.DefaultReplicationFactor
	}
	if rf < 1 {
		return nil, invalid("replication_factor", "must be at least 1, or 0 for the default %d; got %d", s.cfg.DefaultReplicationFactor, rf)
	}
	cfg, err := applyTopicConfig(defaultTopicConfig(limits, rf), m.GetConfig(), limits, rf, t.Plan)
	if err != nil {
		return nil, err
	}
	counts := store.CountLimits{MaxTopics: limits[limit.MaxTopics], MaxPartitions: limits[limit.MaxPartitions]}
	// A cheap check before placement, on the tenant's real usage; the
	// store re-checks the counts atomically when it creates the topic.
	if err := s.checkCountLimits(ctx, t.ID, t.Plan, counts, n); err != nil {
		return nil, err
	}
	if err := s.checkMetricCollision(ctx, t.ID, m.GetName()); err != nil {
		return nil, err
	}

	topic, parts, err := s.placeAndCreate(ctx, t.ID, m.GetName(), n, rf, cfg, counts)
	var le *store.LimitError
	switch {
	case errors.As(err, &le):
		return nil, limitExceeded(t.ID, t.Plan, le)
	case errors.Is(err, store.ErrAlreadyExists):
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("topic %q already exists", m.GetName()))
	case err != nil:
		return nil, err
	}
	s.logger.InfoContext(ctx, "topic created", "tenant", t.ID, "topic", topic.Name, "id", topic.ID, "partitions", n, "rf", rf)
	return connect.NewResponse(&sluicev1.CreateTopicResponse{Topic: toTopicPB(topic), Partitions: toPartitionsPB(parts)}), nil
}

// placeAndCreate places a new topic's partitions over the live brokers
// (rack-aware, balancing the current load) and creates it, within limits.
// Store errors (ErrAlreadyExists, *store.LimitError) pass through.
func (a *API) placeAndCreate(ctx context.Context, tenantID, name string, n, rf int32, cfg store.TopicConfig, limits store.CountLimits) (store.Topic, []store.Partition, error) {
	now := a.now().UTC()
	assignment, err := a.place(ctx, now, n, rf)
	if err != nil {
		return store.Topic{}, nil, err
	}
	topic := store.Topic{
		ID:                store.NewID(),
		TenantID:          tenantID,
		Name:              name,
		Partitions:        n,
		ReplicationFactor: rf,
		Config:            cfg,
		CreatedAt:         now,
		UpdatedAt:         now,
	}
	parts := newPartitions(topic.ID, 0, assignment)
	if err := a.store.CreateTopic(ctx, topic, parts, limits); err != nil {
		return store.Topic{}, nil, err
	}
	return topic, parts, nil
}

// place places n new partitions of replication factor rf over the brokers
// live at now, rack-aware and balancing the load every broker already
// holds (all topics' replicas and leaders): placement.Assign, for a new
// topic and for partitions added to one alike. Too few live brokers is
// FailedPrecondition.
func (a *API) place(ctx context.Context, now time.Time, n, rf int32) ([][]int32, error) {
	brokers, err := a.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	var live []placement.Broker
	for _, b := range brokers {
		if b.Live(now) {
			live = append(live, placement.Broker{ID: b.ID, Rack: b.Rack})
		}
	}
	if int(rf) > len(live) {
		return nil, failedPrecondition("replication factor %d needs %d live brokers; %d live", rf, rf, len(live))
	}
	load, err := a.store.PartitionLoad(ctx)
	if err != nil {
		return nil, err
	}
	pl := make(placement.Load, len(load))
	for id, l := range load {
		pl[id] = placement.BrokerLoad{Replicas: l.Replicas, Leaders: l.Leaders}
	}
	assignment, err := placement.Assign(live, pl, int(n), int(rf))
	if errors.Is(err, placement.ErrNotEnoughBrokers) {
		return nil, failedPrecondition("%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("place partitions: %w", err)
	}
	return assignment, nil
}

// newPartitions is the initial state of new partitions numbered from
// `from`, one per replica list of assignment: led by the preferred leader
// (replicas[0]), every replica in the ISR (their logs are all empty),
// epochs 0. The controller takes over from there, as for any partition.
func newPartitions(topicID string, from int32, assignment [][]int32) []store.Partition {
	parts := make([]store.Partition, len(assignment))
	for i, replicas := range assignment {
		parts[i] = store.Partition{
			TopicID:   topicID,
			Partition: from + int32(i),
			Replicas:  replicas,
			Leader:    replicas[0],
			ISR:       append([]int32(nil), replicas...),
		}
	}
	return parts
}

// checkCountLimits refuses a new topic of n partitions that would pass the
// tenant's topic or partition count, reporting what the tenant holds now
// (never a guess: the store counts it).
func (a *API) checkCountLimits(ctx context.Context, tenantID, plan string, limits store.CountLimits, n int32) error {
	u, err := a.store.TenantUsage(ctx, tenantID)
	if err != nil {
		return err
	}
	var le *store.LimitError
	if errors.As(store.CheckLimits(limits, u.Topics, u.Partitions, int64(n)), &le) {
		return limitExceeded(tenantID, plan, le)
	}
	return nil
}

// limitExceeded explains a count limit in ResourceExhausted: the limit,
// the tenant's usage (le.Current, as the store counted it) and what the
// request adds, with a google.rpc.QuotaFailure naming the tenant and the
// limit (no RetryInfo: waiting does not lift it; a broker relays it as a
// policy violation, Kafka's POLICY_VIOLATION). Every count-limit refusal
// of topics and partitions answers with it.
func limitExceeded(tenantID, plan string, le *store.LimitError) error {
	ce := connect.NewError(connect.CodeResourceExhausted,
		fmt.Errorf("%s limit reached: the tenant may have %d (%s plan and overrides); %d in use, this topic needs %d",
			le.Limit, le.Max, plan, le.Current, le.Request))
	name := limit.MaxTopics.String()
	if le.Limit == "partitions" {
		name = limit.MaxPartitions.String()
	}
	if d, err := connect.NewErrorDetail(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:" + tenantID, Description: name}}}); err == nil {
		ce.AddDetail(d)
	}
	return ce
}

// checkMetricCollision refuses a name that differs from an existing topic
// only by '.' versus '_': both map to the same metric label (Kafka refuses
// these too).
func (s *topicService) checkMetricCollision(ctx context.Context, tenantID, name string) error {
	if !strings.ContainsAny(name, "._") {
		return nil
	}
	existing, err := s.store.ListTopics(ctx, tenantID)
	if err != nil {
		return err
	}
	key := strings.ReplaceAll(name, ".", "_")
	for _, t := range existing {
		if t.Name != name && strings.ReplaceAll(t.Name, ".", "_") == key {
			return invalid("name", "%q collides with existing topic %q: names that differ only in '.' and '_' are not allowed", name, t.Name)
		}
	}
	return nil
}

func (s *topicService) ListTopics(ctx context.Context, _ *connect.Request[sluicev1.ListTopicsRequest]) (*connect.Response[sluicev1.ListTopicsResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	ts, err := s.store.ListTopics(ctx, p.TenantID)
	if err != nil {
		return nil, err
	}
	out := make([]*sluicev1.Topic, len(ts))
	for i, t := range ts {
		out[i] = toTopicPB(t)
	}
	return connect.NewResponse(&sluicev1.ListTopicsResponse{Topics: out}), nil
}

// getTopic resolves a topic by name under the caller's tenant; another
// tenant's topic is NotFound like a missing one.
func (a *API) getTopic(ctx context.Context, tenantID, name string) (store.Topic, error) {
	if err := ValidateTopicName(name); err != nil {
		return store.Topic{}, err
	}
	t, err := a.store.GetTopic(ctx, tenantID, name)
	if errors.Is(err, store.ErrNotFound) {
		return t, notFound("topic %q not found", name)
	}
	return t, err
}

func (s *topicService) DescribeTopic(ctx context.Context, req *connect.Request[sluicev1.DescribeTopicRequest]) (*connect.Response[sluicev1.DescribeTopicResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.getTopic(ctx, p.TenantID, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	parts, err := s.store.ListPartitions(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.DescribeTopicResponse{Topic: toTopicPB(t), Partitions: toPartitionsPB(parts)}), nil
}

func (s *topicService) UpdateTopicConfig(ctx context.Context, req *connect.Request[sluicev1.UpdateTopicConfigRequest]) (*connect.Response[sluicev1.UpdateTopicConfigResponse], error) {
	name := req.Msg.GetName()
	tenant, limits, err := s.topicTenant(ctx, name)
	if err != nil {
		return nil, err
	}
	if req.Msg.GetConfig() == nil {
		return nil, invalid("config", "must be set")
	}
	// Read, merge and validate inside the store's transaction, so two
	// concurrent alters of different keys both take effect.
	t, err := s.store.UpdateTopicConfig(ctx, tenant.ID, name, s.now().UTC(), func(cur store.Topic) (store.TopicConfig, error) {
		return applyTopicConfig(cur.Config, req.Msg.GetConfig(), limits, cur.ReplicationFactor, tenant.Plan)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("topic %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.UpdateTopicConfigResponse{Topic: toTopicPB(t)}), nil
}

func (s *topicService) DeleteTopic(ctx context.Context, req *connect.Request[sluicev1.DeleteTopicRequest]) (*connect.Response[sluicev1.DeleteTopicResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	name := req.Msg.GetName()
	if err := ValidateTopicName(name); err != nil {
		return nil, err
	}
	t, err := s.store.DeleteTopic(ctx, p.TenantID, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("topic %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "topic deleted", "tenant", p.TenantID, "topic", name, "id", t.ID)
	return connect.NewResponse(&sluicev1.DeleteTopicResponse{Topic: toTopicPB(t)}), nil
}

// topicTenant is the prologue of the calls that change a topic: the
// caller's tenant, its limits (plan and overrides), and a valid topic name.
func (s *topicService) topicTenant(ctx context.Context, name string) (store.Tenant, tenants.Limits, error) {
	_, t, err := s.tenantOf(ctx)
	if err != nil {
		return store.Tenant{}, tenants.Limits{}, err
	}
	limits, _, err := limitsOf(t)
	if err != nil {
		return store.Tenant{}, tenants.Limits{}, err
	}
	if err := ValidateTopicName(name); err != nil {
		return store.Tenant{}, tenants.Limits{}, err
	}
	return t, limits, nil
}

// validPartitionCount checks a topic's partition count (hint says more
// about the field in the message, or is empty).
func validPartitionCount(n int32, hint string) error {
	switch {
	case n < 1:
		return invalid("partition_count", "must be at least 1%s; got %d", hint, n)
	case n > maxPartitionsPerTopic:
		return invalid("partition_count", "must be at most %d; got %d", maxPartitionsPerTopic, n)
	}
	return nil
}
