package broker

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/admission"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// Quotas (issue 17, docs/quotas-and-billing.md) are enforced by
// dataplane/admission's Enforcer (b.quota): the services ask it before
// their work (AdmitProduce, CheckFetch, CheckProducerID, the coordinators'
// AdmitGroup and AdmitTransactionalID), the gate before a call's body is
// read (admitCall), and its loop (Run, started by the broker's Run)
// exchanges the tenants' traffic and allotments with the control plane.
// This file wires it: the control-plane calls with the broker's client,
// the holdings its reports carry, and the gate's hook.

// newEnforcer returns the broker's quota enforcement (New, once b.cp
// and b.registry are set).
func (b *Broker) newEnforcer() *admission.Enforcer {
	return admission.New(admission.Config{
		BrokerID:    b.cfg.ID,
		BrokerEpoch: b.brokerEpoch.Load,
		Interval:    b.cfg.QuotaExchangeInterval,
		Exchange:    exchangeVia(b.cp),
		Reserve: func(ctx context.Context, req *sluicev1.ReserveObjectsRequest) (*sluicev1.ReserveObjectsResponse, error) {
			res, err := b.cp.ReserveObjects(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, connecterr.FromConnect(err)
			}
			return res.Msg, nil
		},
		HotStorage:       b.hotStorageByTenant,
		Groups:           b.groupsByTenant,
		TransactionalIDs: b.transactionalIDsByTenant,
		CountRequest:     func(tenantID string) { b.usageCounters.AddRequest(tenantID) },
		Registerer:       b.registry,
		Logger:           b.logger,
	})
}

// exchangeVia is BrokerService.ExchangeQuotas through cp.
func exchangeVia(cp sluicev1connect.BrokerServiceClient) admission.ExchangeFunc {
	return func(ctx context.Context, req *sluicev1.ExchangeQuotasRequest) (*sluicev1.ExchangeQuotasResponse, error) {
		res, err := cp.ExchangeQuotas(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, connecterr.FromConnect(err)
		}
		return res.Msg, nil
	}
}

// admitCall is the broker's httpgate.Admit: the Enforcer's AdmitCall,
// with the call's kind told by its procedure and a call another broker
// forwarded (decided and billed where the client sent it) told by its
// credential; a refusal in Connect's terms, as the gate answers it.
func (b *Broker) admitCall(ctx context.Context, r *http.Request, procedure string, p tenants.Principal, size int64) error {
	if p.Kind != tenants.PrincipalTenant {
		return nil
	}
	kind := admission.CallOther
	switch procedure {
	case sluicev1connect.RecordServiceProduceProcedure, sluicev1connect.RecordServiceProduceManyProcedure:
		kind = admission.CallProduce
	case sluicev1connect.RecordServiceFetchProcedure:
		kind = admission.CallFetch
	}
	return toConnect(b.quota.AdmitCall(ctx, admission.Call{Principal: p, Kind: kind, Size: size,
		Forwarded: connectapi.ForwardedByBroker(r.Header, b.cfg.BrokerToken)}))
}

// groupsByTenant counts the groups of the offsets partitions this broker
// leads, per tenant, loading their coordinators (a partition whose
// coordinator cannot load yet is left out this time).
func (b *Broker) groupsByTenant(ctx context.Context) map[string]int {
	out := map[string]int{}
	t, ok := b.metadata().Topic(systemTenantID, offsetsTopic)
	if !ok {
		return out
	}
	for _, pm := range t.Partitions {
		if pm.Leader != b.cfg.ID {
			continue
		}
		c, err := b.coordinatorAt(ctx, t, pm)
		if err != nil {
			continue
		}
		for id, n := range c.GroupsByTenant() {
			out[id] += n
		}
	}
	return out
}

// transactionalIDsByTenant counts the transactional ids of the
// transaction coordinators this broker hosts, per tenant.
func (b *Broker) transactionalIDsByTenant() map[string]int {
	out := map[string]int{}
	for _, c := range b.txns.Current() {
		for id, n := range c.IDsByTenant() {
			out[id] += n
		}
	}
	return out
}

// hotStorageByTenant sums the local log bytes of the partitions this
// broker leads, per tenant.
func (b *Broker) hotStorageByTenant() map[string]int64 {
	out := map[string]int64{}
	for _, p := range b.partitions() {
		if p.TenantID() == systemTenantID || p.Status().Role != partition.RoleLeader {
			continue
		}
		out[p.TenantID()] += p.Log().Size()
	}
	return out
}
