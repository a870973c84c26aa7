package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/quota"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
)

// ReserveObjects implements BrokerService: a coordinator's reservations of
// new groups and transactional ids, decided per tenant by the store
// (store.UsageStore.ReserveObjects: the tenant row locked, its fresh
// reports plus its pending names against its limit), so that a burst of
// creations over any number of brokers and control-plane replicas stops
// exactly at the limit. The tenants' limits come from the limit cache, as
// the allotments' do; an unknown tenant's reservations are refused.
func (s *brokerService) ReserveObjects(ctx context.Context, req *connect.Request[sluicev1.ReserveObjectsRequest]) (*connect.Response[sluicev1.ReserveObjectsResponse], error) {
	m := req.Msg
	if err := validateBrokerCall(m.GetBrokerId(), m.GetBrokerEpoch()); err != nil {
		return nil, err
	}
	if n := len(m.GetReservations()); n > store.MaxReservations {
		return nil, invalid("reservations", "has %d entries; at most %d", n, store.MaxReservations)
	}
	objs, err := validObjectReservations("reservations", m.GetReservations())
	if err != nil {
		return nil, err
	}
	brokers, err := s.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkBrokerEpoch(brokers, m.GetBrokerId(), m.GetBrokerEpoch()); err != nil {
		return nil, err
	}
	now := s.now().UTC()
	// Each tenant's reservations, in their order, decided in one store
	// transaction.
	var tenants []string
	byTenant := map[string][]int{}
	for i, o := range objs {
		if byTenant[o.TenantID] == nil {
			tenants = append(tenants, o.TenantID)
		}
		byTenant[o.TenantID] = append(byTenant[o.TenantID], i)
	}
	res := &sluicev1.ReserveObjectsResponse{Results: make([]*sluicev1.ObjectReservationResult, len(objs))}
	for _, id := range tenants {
		idx := byTenant[id]
		refuse := func() {
			for _, i := range idx {
				res.Results[i] = &sluicev1.ObjectReservationResult{}
			}
		}
		limits, known, err := s.limits.get(ctx, s.store, id, now)
		if err != nil {
			return nil, err
		}
		if !known {
			refuse()
			continue
		}
		r := store.Reservations{
			TenantID: id, BrokerID: m.GetBrokerId(), At: now, TTL: quota.ReservationTTL,
			ReportedAfter: now.Add(-quotaConfig.Fresh),
			Limits:        map[store.ObjectKind]int64{store.ObjectGroup: limits[limit.MaxGroups], store.ObjectTransactionalID: limits[limit.MaxTransactionalIDs]},
		}
		for _, i := range idx {
			r.Objects = append(r.Objects, objs[i])
		}
		decided, err := s.store.ReserveObjects(ctx, r)
		switch {
		case errors.Is(err, store.ErrNotFound):
			refuse()
			continue
		case err != nil:
			return nil, err
		}
		for j, i := range idx {
			d := decided[j]
			res.Results[i] = &sluicev1.ObjectReservationResult{Granted: d.Granted, Count: d.Count, Limit: d.Limit}
		}
	}
	return connect.NewResponse(res), nil
}

// validObjectReservations checks reservations (of ReserveObjects, or the
// confirmations of ExchangeQuotas) and returns them with canonical tenant
// ids.
func validObjectReservations(field string, rs []*sluicev1.ObjectReservation) ([]store.ObjectReservation, error) {
	out := make([]store.ObjectReservation, len(rs))
	for i, r := range rs {
		f := fmt.Sprintf("%s[%d]", field, i)
		id, ok := store.CanonicalID(r.GetTenantId())
		if !ok {
			return nil, invalid(f+".tenant_id", "%q is not a tenant id", r.GetTenantId())
		}
		var kind store.ObjectKind
		switch r.GetKind() {
		case sluicev1.CountedKind_COUNTED_KIND_GROUP:
			kind = store.ObjectGroup
		case sluicev1.CountedKind_COUNTED_KIND_TRANSACTIONAL_ID:
			kind = store.ObjectTransactionalID
		default:
			return nil, invalid(f+".kind", "must be a group or a transactional id; got %v", r.GetKind())
		}
		if n := len(r.GetName()); n == 0 || n > store.MaxObjectName {
			return nil, invalid(f+".name", "must be 1 to %d bytes; got %d", store.MaxObjectName, n)
		}
		out[i] = store.ObjectReservation{TenantID: id, Kind: kind, Name: r.GetName(), Token: r.GetToken()}
		if _, err := store.CheckConfirmations(out[i : i+1]); err != nil {
			return nil, invalid(f, "%v", err)
		}
	}
	return out, nil
}
