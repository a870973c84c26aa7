package api

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants"
)

type operatorService struct{ *API }

func (s *operatorService) ListTenants(ctx context.Context, req *connect.Request[sluicev1.ListTenantsRequest]) (*connect.Response[sluicev1.ListTenantsResponse], error) {
	size := int(req.Msg.GetPageSize())
	switch {
	case size < 0 || size > 1000:
		return nil, invalid("page_size", "must be between 0 and 1000; got %d", size)
	case size == 0:
		size = 100
	}
	ts, err := s.store.ListTenants(ctx, req.Msg.GetPageToken(), size+1)
	if errors.Is(err, store.ErrNotFound) {
		return nil, invalid("page_token", "%q is not a token from a previous page", req.Msg.GetPageToken())
	}
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListTenantsResponse{}
	if len(ts) > size {
		ts = ts[:size]
		res.NextPageToken = ts[size-1].ID
	}
	for _, t := range ts {
		tpb, err := toTenantPB(t)
		if err != nil {
			return nil, err
		}
		res.Tenants = append(res.Tenants, tpb)
	}
	return connect.NewResponse(res), nil
}

func (s *operatorService) UpdateTenant(ctx context.Context, req *connect.Request[sluicev1.UpdateTenantRequest]) (*connect.Response[sluicev1.UpdateTenantResponse], error) {
	m := req.Msg
	if m.GetTenantId() == "" {
		return nil, invalid("tenant_id", "must not be empty")
	}
	if m.Plan != nil && !slices.Contains(tenants.Plans(), m.GetPlan()) {
		return nil, invalid("plan", "%q is not a plan; choose one of %v", m.GetPlan(), tenants.Plans())
	}
	if m.Status != nil && m.GetStatus() != store.TenantActive && m.GetStatus() != store.TenantSuspended {
		return nil, invalid("status", "must be %q or %q", store.TenantActive, store.TenantSuspended)
	}
	var overrides []byte
	if m.Overrides != nil {
		o, err := fromOverridesPB(m.Overrides)
		if err != nil {
			return nil, err
		}
		if err := o.Validate(); err != nil {
			return nil, invalid("overrides", "%v", err)
		}
		if overrides, err = json.Marshal(o); err != nil {
			return nil, err
		}
	}
	t, err := s.store.UpdateTenant(ctx, m.GetTenantId(), func(cur store.Tenant) (store.Tenant, error) {
		if m.Plan != nil {
			cur.Plan = m.GetPlan()
		}
		if m.Status != nil {
			cur.Status = m.GetStatus()
		}
		if m.Overrides != nil {
			cur.Overrides = overrides
		}
		return cur, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("tenant %q not found", m.GetTenantId())
	}
	if err != nil {
		return nil, err
	}
	s.limits.forget(t.ID) // this replica's next exchange allots the new limits
	s.logger.InfoContext(ctx, "tenant updated by operator", "tenant", t.ID, "plan", t.Plan, "status", t.Status, "overrides", string(t.Overrides))
	tpb, err := toTenantPB(t)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.UpdateTenantResponse{Tenant: tpb}), nil
}

func (s *operatorService) ListBrokers(ctx context.Context, _ *connect.Request[sluicev1.ListBrokersRequest]) (*connect.Response[sluicev1.ListBrokersResponse], error) {
	bs, err := s.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	res := &sluicev1.ListBrokersResponse{}
	for _, b := range bs {
		res.Brokers = append(res.Brokers, toBrokerPB(b, now))
	}
	return connect.NewResponse(res), nil
}

type brokerService struct{ *API }

func (s *brokerService) RegisterBroker(ctx context.Context, req *connect.Request[sluicev1.RegisterBrokerRequest]) (*connect.Response[sluicev1.RegisterBrokerResponse], error) {
	m := req.Msg
	if m.GetBrokerId() < 0 {
		return nil, invalid("broker_id", "must not be negative; got %d", m.GetBrokerId())
	}
	if err := validateAddress("address", m.GetAddress()); err != nil {
		return nil, err
	}
	if m.GetExternalAddress() != "" {
		if err := validateAddress("external_address", m.GetExternalAddress()); err != nil {
			return nil, err
		}
	}
	if m.GetKafkaAddress() != "" {
		if err := validateHostPort("kafka_address", m.GetKafkaAddress()); err != nil {
			return nil, err
		}
	}
	if len(m.GetRack()) > 64 {
		return nil, invalid("rack", "is longer than 64 characters")
	}
	now := s.now().UTC()
	if err := s.fencePreviousIncarnation(ctx, m.GetBrokerId(), now); err != nil {
		return nil, err
	}
	b, err := s.store.RegisterBroker(ctx, store.Broker{
		ID:              m.GetBrokerId(),
		Address:         m.GetAddress(),
		ExternalAddress: m.GetExternalAddress(),
		KafkaAddress:    m.GetKafkaAddress(),
		Rack:            m.GetRack(),
		LeaseExpiresAt:  now.Add(s.cfg.BrokerLease),
		RegisteredAt:    now,
	})
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "broker registered", "broker", b.ID, "epoch", b.Epoch, "address", b.Address, "external_address", b.ExternalAddress, "kafka_address", b.KafkaAddress, "rack", b.Rack)
	return connect.NewResponse(&sluicev1.RegisterBrokerResponse{
		BrokerEpoch:         b.Epoch,
		LeaseExpireTime:     ts(b.LeaseExpiresAt),
		HeartbeatIntervalMs: (s.cfg.BrokerLease / 3).Milliseconds(),
	}), nil
}

// fenceBatch bounds the partitions one transaction of
// fencePreviousIncarnation writes (with three brokers, a restarted one is a
// replica of every partition).
const fenceBatch = 500

// fencePreviousIncarnation treats a broker registering again as the failure
// of its previous incarnation, before the new one gets its epoch: the
// restarted broker may have lost its log (an empty disk) and must neither
// lead nor count in an ISR under assignments made to the old incarnation.
// It leaves every ISR that has other members, and every partition it led
// fails over to the first live member of the remaining ISR, or goes offline
// until one returns (the controller elects it then). As sole ISR member it
// stays: nobody else has the data (electing it after an empty-disk restart
// is the unclean case, as in Kafka without KIP-966). The leader adds it
// back to the ISR once it has caught up. Writes are compare-and-sets on the
// partition epoch, fenceBatch to a transaction (store.UpdatePartitions),
// retried from a fresh read on conflicts.
func (s *brokerService) fencePreviousIncarnation(ctx context.Context, id int32, now time.Time) error {
	brokers, err := s.store.ListBrokers(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(brokers, func(b store.Broker) bool { return b.ID == id }) {
		return nil // first registration
	}
	live := func(b int32) bool {
		i := slices.IndexFunc(brokers, func(x store.Broker) bool { return x.ID == b })
		return b != id && i >= 0 && brokers[i].Live(now)
	}
	for range 5 {
		// Every partition: the broker may be a replica of any of them (a
		// registration is rare; this is the one full listing it costs).
		all, err := s.store.ListAllPartitions(ctx)
		if err != nil {
			return err
		}
		var (
			updates []store.PartitionUpdate
			before  []int32 // leader of each update's partition before it
		)
		for _, pt := range all {
			p := pt.Partition
			if p.Leader != id && !slices.Contains(p.ISR, id) {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(p.ISR), func(b int32) bool { return b == id })
			next := p
			next.PartitionEpoch = p.PartitionEpoch + 1
			next.ISR = rest
			switch {
			case p.Leader == id:
				next.Leader, next.LeaderEpoch = -1, p.LeaderEpoch+1
				for _, r := range p.Replicas {
					if slices.Contains(rest, r) && live(r) {
						next.Leader = r
						break
					}
				}
				if len(rest) == 0 {
					next.ISR = p.ISR // sole member: keep it, offline until it is elected again
				}
			case len(rest) == 0:
				continue // sole ISR member of an offline partition: keep it
			}
			updates = append(updates, store.PartitionUpdate{Partition: next, ExpectedEpoch: p.PartitionEpoch})
			before = append(before, p.Leader)
		}
		conflict := false
		for start := 0; start < len(updates); start += fenceBatch {
			batch := updates[start:min(start+fenceBatch, len(updates))]
			outcomes, err := s.store.UpdatePartitions(ctx, batch)
			if err != nil {
				return err
			}
			for i, u := range batch {
				switch err := outcomes[i]; {
				case err == nil:
					next := u.Partition
					s.logger.InfoContext(ctx, "broker registered again: fenced its previous incarnation",
						"broker", id, "topic_id", next.TopicID, "partition", next.Partition,
						"leader_before", before[start+i], "leader", next.Leader, "leader_epoch", next.LeaderEpoch, "isr", next.ISR)
				case errors.Is(err, store.ErrConflict):
					conflict = true
				case errors.Is(err, store.ErrNotFound):
				default:
					return err
				}
			}
		}
		if !conflict {
			return nil
		}
	}
	return connect.NewError(connect.CodeUnavailable, errors.New("partitions changed concurrently while fencing the previous incarnation; register again"))
}

func (s *brokerService) HeartbeatBroker(ctx context.Context, req *connect.Request[sluicev1.HeartbeatBrokerRequest]) (*connect.Response[sluicev1.HeartbeatBrokerResponse], error) {
	m := req.Msg
	b, err := s.store.HeartbeatBroker(ctx, m.GetBrokerId(), m.GetBrokerEpoch(), s.now().UTC().Add(s.cfg.BrokerLease))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, notFound("broker %d is not registered", m.GetBrokerId())
	case errors.Is(err, store.ErrConflict):
		return nil, failedPrecondition("broker %d epoch %d is stale; register again", m.GetBrokerId(), m.GetBrokerEpoch())
	case err != nil:
		return nil, err
	}
	return connect.NewResponse(&sluicev1.HeartbeatBrokerResponse{LeaseExpireTime: ts(b.LeaseExpiresAt)}), nil
}

// producerIDBlockSize is how many producer ids a broker reserves at a time.
const producerIDBlockSize = 1000

func (s *brokerService) AllocateProducerIds(ctx context.Context, req *connect.Request[sluicev1.AllocateProducerIdsRequest]) (*connect.Response[sluicev1.AllocateProducerIdsResponse], error) {
	m := req.Msg
	first, err := s.store.AllocateProducerIDs(ctx, m.GetBrokerId(), m.GetBrokerEpoch(), producerIDBlockSize, s.now().UTC())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, notFound("broker %d is not registered", m.GetBrokerId())
	case errors.Is(err, store.ErrConflict):
		return nil, failedPrecondition("broker %d epoch %d is stale; register again", m.GetBrokerId(), m.GetBrokerEpoch())
	case err != nil:
		return nil, err
	}
	return connect.NewResponse(&sluicev1.AllocateProducerIdsResponse{FirstProducerId: first, Count: producerIDBlockSize}), nil
}

func (s *brokerService) ListRevokedAPIKeys(ctx context.Context, req *connect.Request[sluicev1.ListRevokedAPIKeysRequest]) (*connect.Response[sluicev1.ListRevokedAPIKeysResponse], error) {
	now := s.now().UTC()
	// Tokens of keys revoked before the horizon have all expired, so the
	// feed never needs to go further back: it stays small however long
	// the revocation history grows.
	horizon := now.Add(-s.cfg.TokenTTL - tenants.MaxLeeway)
	since := horizon
	if req.Msg.GetSince() != nil {
		if err := req.Msg.GetSince().CheckValid(); err != nil {
			return nil, invalid("since", "%v", err)
		}
		if t := req.Msg.GetSince().AsTime(); t.After(horizon) {
			since = t
		}
	}
	keys, err := s.store.ListRevokedAPIKeys(ctx, since)
	if err != nil {
		return nil, err
	}
	// Suspensions have no horizon (a tenant stays suspended until an
	// operator reinstates it): every answer carries the whole current set.
	suspended, err := s.store.ListSuspendedTenants(ctx)
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListRevokedAPIKeysResponse{ServerTime: ts(now), SuspendedTenantIds: suspended}
	for _, k := range keys {
		res.Keys = append(res.Keys, &sluicev1.RevokedAPIKey{Id: k.ID, TenantId: k.TenantID, RevokeTime: ts(k.RevokedAt)})
	}
	return connect.NewResponse(res), nil
}
