package broker

import (
	"fmt"

	"github.com/sluicemq/sluice/dataplane/admission"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

// Transaction size (docs/transactions.md, "Limits"): a transaction holds at
// most its tenant's max_partitions_per_transaction partitions and
// max_groups_per_transaction groups, since its end writes a marker to each
// (20,000 groups added in one request made an EndTransaction of 9 to 16 s).
// The transaction coordinators check it where a transaction grows
// (txn.Config.Bounds), whatever call adds to it: AddPartitionsToTransaction,
// or the verification of a transactional produce or TxnCommitOffsets.

// txnBounds are a tenant's transaction bounds (txn.Config.Bounds): its
// limits as the last quota exchange carried them or, for a tenant with no
// allotment here yet (for which an exchange is asked), the largest plan's.
// The system tenant's transactions are not bounded.
func (b *Broker) txnBounds(tenantID string) txn.Bounds {
	if tenantID == systemTenantID {
		return txn.Bounds{}
	}
	l := b.quota.Limits(tenantID)
	parts, groups := l[limit.MaxPartitionsPerTransaction], l[limit.MaxGroupsPerTransaction]
	if parts > 0 && groups > 0 {
		return txn.Bounds{Partitions: int(parts), Groups: int(groups)}
	}
	b.quota.NoticeTenant(tenantID)
	out := txn.Bounds{Partitions: int(parts), Groups: int(groups)}
	for _, plan := range tenants.Plans() {
		pl, err := tenants.PlanLimits(plan)
		if err != nil {
			continue
		}
		if parts <= 0 {
			out.Partitions = max(out.Partitions, int(pl[limit.MaxPartitionsPerTransaction]))
		}
		if groups <= 0 {
			out.Groups = max(out.Groups, int(pl[limit.MaxGroupsPerTransaction]))
		}
	}
	return out
}

// txnTooLarge is the refusal of an add past a transaction's bounds:
// ResourceExhausted with a QuotaFailure naming the limit and no RetryInfo,
// as the other count limits are (a plan limit, which retrying does not
// lift; the request itself is well formed).
func txnTooLarge(e *txn.TooLargeError) error {
	name := limit.MaxPartitionsPerTransaction.String()
	if e.What == "groups" {
		name = limit.MaxGroupsPerTransaction.String()
	}
	return admission.CountRefusal(e.Tenant, name, fmt.Sprintf(
		"tenant %s: the transaction of transactional id %q would hold %d %s, over its %s limit of %d: nothing was added (end the transaction, and write the rest in another)",
		e.Tenant, e.TransactionalID, e.Count, e.What, name, e.Max))
}
