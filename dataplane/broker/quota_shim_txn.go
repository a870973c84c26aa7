package broker

import (
	"context"

	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/limit/limitpb"
)

// The quota names dataplane/txns asks for, on the broker's current quotas,
// until dataplane/admission's Enforcer has them.

// AdmitTransactionalID is the transaction coordinators' admission of a new
// transactional id (txns.Admission; admitTransactionalID).
func (b *Broker) AdmitTransactionalID(ctx context.Context, tenantID, transactionalID string) (func(), error) {
	return b.admitTransactionalID(ctx, tenantID, transactionalID)
}

// txnLimits are a tenant's limits as the last quota exchange carried them
// (txns.Deps.Limits): zero when this broker has no allotment for the
// tenant, for which it asks an exchange at once.
func (b *Broker) txnLimits(tenantID string) limit.Values {
	a := b.quota.allotment(tenantID)
	if a == nil {
		b.quota.noticeTenant(tenantID)
	}
	return limitpb.FromLimits(a.GetLimits())
}
