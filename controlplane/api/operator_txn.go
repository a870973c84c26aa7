package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// brokerCallTimeout bounds one broker's answer to ListAllTransactions.
const brokerCallTimeout = 10 * time.Second

// ListTransactions lists every tenant's transactional ids (or one
// tenant's, or one id) for an operator. The transaction coordinators are
// the brokers leading the partitions of __transaction_state, and only they
// know the state, so it asks them (ReplicaService.ListAllTransactions,
// with the broker credential): every live broker and every leader the
// store names, merged, sorted by tenant then id, and without the
// duplicates a leadership move can give (the copy changed last is kept).
// A leaderless partition or a broker that fails makes it Unavailable,
// naming them: the list would be incomplete.
func (s *operatorService) ListTransactions(ctx context.Context, req *connect.Request[sluicev1.OperatorServiceListTransactionsRequest]) (*connect.Response[sluicev1.OperatorServiceListTransactionsResponse], error) {
	m := req.Msg
	tenantID := m.GetTenantId()
	if tenantID != "" {
		id, ok := store.CanonicalID(tenantID)
		if !ok {
			return nil, invalid("tenant_id", "%q is not a tenant id (a UUID)", tenantID)
		}
		tenantID = id
	}
	if len(m.GetTransactionalId()) > 255 {
		return nil, invalid("transactional_id", "is longer than 255 bytes")
	}
	topic, err := s.store.GetTopic(ctx, system.TenantID, system.TransactionStateTopic)
	if errors.Is(err, store.ErrNotFound) {
		// Created once enough brokers are live; until then no transaction exists.
		return connect.NewResponse(&sluicev1.OperatorServiceListTransactionsResponse{}), nil
	}
	if err != nil {
		return nil, err
	}
	parts, err := s.store.ListPartitions(ctx, topic.ID)
	if err != nil {
		return nil, err
	}
	brokers, err := s.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	ask := map[int32]bool{}
	for _, b := range brokers {
		if b.Live(now) {
			ask[b.ID] = true
		}
	}
	for _, p := range parts {
		if p.Leader < 0 {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("list transactions: partition %d of %s has no leader, so its transactions cannot be listed; retry once it is elected", p.Partition, system.TransactionStateTopic))
		}
		ask[p.Leader] = true // a leader whose lease lapsed is asked too: without it the list would be incomplete
	}
	addr := map[int32]string{}
	for _, b := range brokers {
		addr[b.ID] = b.Address
	}
	var (
		mu   sync.Mutex
		all  []*sluicev1.TransactionDescription
		errs []error
		wg   sync.WaitGroup
	)
	breq := &sluicev1.ListAllTransactionsRequest{TenantId: tenantID, TransactionalId: m.GetTransactionalId()}
	for id := range ask {
		wg.Go(func() {
			out, err := s.brokerTransactions(ctx, addr[id], breq)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("broker %d (%s): %w", id, addr[id], err))
				return
			}
			all = append(all, out...)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("list transactions: %w", errors.Join(errs...)))
	}
	slices.SortFunc(all, func(a, b *sluicev1.TransactionDescription) int {
		return cmp.Or(strings.Compare(a.GetTenantId(), b.GetTenantId()),
			strings.Compare(a.GetTransactionalId(), b.GetTransactionalId()),
			cmp.Compare(b.GetUpdateTimeMs(), a.GetUpdateTimeMs())) // the latest first: CompactFunc keeps it
	})
	all = slices.CompactFunc(all, func(a, b *sluicev1.TransactionDescription) bool {
		return a.GetTenantId() == b.GetTenantId() && a.GetTransactionalId() == b.GetTransactionalId()
	})
	return connect.NewResponse(&sluicev1.OperatorServiceListTransactionsResponse{Transactions: all}), nil
}

// brokerTransactions asks one broker for the transactions its
// coordinators hold, keeping only those of the request's filters (a
// broker filters too; this does not rely on it).
func (s *operatorService) brokerTransactions(ctx context.Context, address string, req *sluicev1.ListAllTransactionsRequest) ([]*sluicev1.TransactionDescription, error) {
	if address == "" {
		return nil, errors.New("not registered")
	}
	rc := sluicev1connect.NewReplicaServiceClient(s.brokerHTTP, endpoint.URL(address, "http"), connect.WithGRPC(),
		connect.WithInterceptors(tenants.Bearer(s.cfg.BrokerToken)))
	cctx, cancel := context.WithTimeout(ctx, brokerCallTimeout)
	defer cancel()
	res, err := rc.ListAllTransactions(cctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	out := res.Msg.GetTransactions()
	return slices.DeleteFunc(out, func(t *sluicev1.TransactionDescription) bool {
		return (req.GetTenantId() != "" && t.GetTenantId() != req.GetTenantId()) ||
			(req.GetTransactionalId() != "" && t.GetTransactionalId() != req.GetTransactionalId())
	}), nil
}
