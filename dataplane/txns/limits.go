package txns

import (
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// Transaction size (docs/transactions.md, "Limits"): a transaction holds at
// most its tenant's max_partitions_per_transaction partitions and
// max_groups_per_transaction groups, since its end writes a marker to each
// (20,000 groups added in one request made an EndTransaction of 9 to 16 s).
// The transaction coordinators check it where a transaction grows
// (txn.Config.Bounds), whatever call adds to it: AddPartitions, or the
// verification of a transactional produce or offset commit.

// bounds are a tenant's transaction bounds (txn.Config.Bounds): its limits
// as the last quota exchange carried them (Deps.Limits) or, for a tenant
// with no allotment here yet (for which Deps.Limits asks an exchange), the
// largest plan's. The system tenant's transactions are not bounded.
func (s *Service) bounds(tenantID string) txn.Bounds {
	if tenantID == system.TenantID {
		return txn.Bounds{}
	}
	var l limit.Values
	if s.deps.Limits != nil {
		l = s.deps.Limits(tenantID)
	}
	return boundsOf(l)
}

// boundsOf are the bounds limits l set, the largest plan's where l sets
// none.
func boundsOf(l limit.Values) txn.Bounds {
	parts, groups := l[limit.MaxPartitionsPerTransaction], l[limit.MaxGroupsPerTransaction]
	out := txn.Bounds{Partitions: int(parts), Groups: int(groups)}
	if parts > 0 && groups > 0 {
		return out
	}
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
