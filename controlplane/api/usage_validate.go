package api

import (
	"fmt"
	"math"

	"github.com/sluicemq/sluice/controlplane/quota"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit/limitpb"
)

// maxReportTenants bounds the tenants of one ExchangeQuotas or ReportUsage
// request, and maxReportRanges the ingress ranges of one ReportUsage (the
// request size cap bounds them too).
const (
	maxReportTenants = 10000
	maxReportRanges  = 10000
)

// validateBrokerCall checks the fields every metering call carries.
func validateBrokerCall(brokerID int32, brokerEpoch int64) error {
	switch {
	case brokerID < 0:
		return invalid("broker_id", "must not be negative; got %d", brokerID)
	case brokerEpoch < 1:
		return invalid("broker_epoch", "must be positive; got %d", brokerEpoch)
	}
	return nil
}

// validQuotaRates checks that every rate is a finite, non-negative number
// and returns them.
func validQuotaRates(field string, r *sluicev1.QuotaRates) (quota.Rates, error) {
	for _, v := range limitpb.RateNames(r) {
		if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) || v.Value < 0 {
			return quota.Rates{}, invalid(field+"."+v.Name, "must be a finite number >= 0; got %v", v.Value)
		}
	}
	return limitpb.FromRates(r), nil
}

// tenantReport is one validated entry of an ExchangeQuotasRequest.
type tenantReport struct {
	TenantID string // canonical
	quota.Report
}

// validateExchangeQuotas checks the request and returns its reports, with
// canonical tenant ids, each tenant once.
func validateExchangeQuotas(m *sluicev1.ExchangeQuotasRequest) ([]tenantReport, error) {
	if err := validateBrokerCall(m.GetBrokerId(), m.GetBrokerEpoch()); err != nil {
		return nil, err
	}
	if n := len(m.GetTenants()); n > maxReportTenants {
		return nil, invalid("tenants", "has %d entries; at most %d", n, maxReportTenants)
	}
	seen := make(map[string]bool, len(m.GetTenants()))
	out := make([]tenantReport, 0, len(m.GetTenants()))
	for i, t := range m.GetTenants() {
		field := fmt.Sprintf("tenants[%d]", i)
		id, ok := store.CanonicalID(t.GetTenantId())
		if !ok {
			return nil, invalid(field+".tenant_id", "%q is not a tenant id", t.GetTenantId())
		}
		if seen[id] {
			return nil, invalid(field+".tenant_id", "tenant %s is listed twice", id)
		}
		seen[id] = true
		offered, err := validQuotaRates(field+".offered", t.GetOffered())
		if err != nil {
			return nil, err
		}
		admitted, err := validQuotaRates(field+".admitted", t.GetAdmitted())
		if err != nil {
			return nil, err
		}
		switch {
		case t.GetHotStorageBytes() < 0:
			return nil, invalid(field+".hot_storage_bytes", "must not be negative; got %d", t.GetHotStorageBytes())
		case t.GetGroups() < 0:
			return nil, invalid(field+".groups", "must not be negative; got %d", t.GetGroups())
		case t.GetTransactionalIds() < 0:
			return nil, invalid(field+".transactional_ids", "must not be negative; got %d", t.GetTransactionalIds())
		}
		out = append(out, tenantReport{TenantID: id, Report: quota.Report{
			BrokerID:         m.GetBrokerId(),
			Offered:          offered,
			Admitted:         admitted,
			HotStorageBytes:  t.GetHotStorageBytes(),
			Groups:           int64(t.GetGroups()),
			TransactionalIDs: int64(t.GetTransactionalIds()),
			Arriving:         t.GetArriving(),
		}})
	}
	return out, nil
}

// validateReportUsage checks a ReportUsageRequest's fields (not what the
// store decides: whether the sequence is new, where each partition's
// metering stands).
func validateReportUsage(m *sluicev1.ReportUsageRequest) error {
	if err := validateBrokerCall(m.GetBrokerId(), m.GetBrokerEpoch()); err != nil {
		return err
	}
	if m.GetSequence() < 1 {
		return invalid("sequence", "must be positive; got %d", m.GetSequence())
	}
	if n := len(m.GetCounters()); n > maxReportTenants {
		return invalid("counters", "has %d entries; at most %d", n, maxReportTenants)
	}
	if n := len(m.GetIngress()); n > maxReportRanges {
		return invalid("ingress", "has %d entries; at most %d", n, maxReportRanges)
	}
	seen := make(map[string]bool, len(m.GetCounters()))
	for i, c := range m.GetCounters() {
		field := fmt.Sprintf("counters[%d]", i)
		id, ok := store.CanonicalID(c.GetTenantId())
		switch {
		case !ok:
			return invalid(field+".tenant_id", "%q is not a tenant id", c.GetTenantId())
		case seen[id]:
			return invalid(field+".tenant_id", "tenant %s is listed twice", id)
		case c.GetEgressBytes() < 0:
			return invalid(field+".egress_bytes", "must not be negative; got %d", c.GetEgressBytes())
		case c.GetRequests() < 0:
			return invalid(field+".requests", "must not be negative; got %d", c.GetRequests())
		}
		seen[id] = true
	}
	for i, r := range m.GetIngress() {
		field := fmt.Sprintf("ingress[%d]", i)
		_, ok := store.CanonicalID(r.GetTopicId())
		switch {
		case !ok:
			return invalid(field+".topic_id", "%q is not a topic id", r.GetTopicId())
		case r.GetPartition() < 0:
			return invalid(field+".partition", "must not be negative; got %d", r.GetPartition())
		case r.GetLeaderEpoch() < 0:
			return invalid(field+".leader_epoch", "must not be negative; got %d", r.GetLeaderEpoch())
		case r.GetStartOffset() < 0:
			return invalid(field+".start_offset", "must not be negative; got %d", r.GetStartOffset())
		case r.GetEndOffset() < r.GetStartOffset():
			return invalid(field+".end_offset", "%d is below start_offset %d", r.GetEndOffset(), r.GetStartOffset())
		case r.GetBytes() < 0:
			return invalid(field+".bytes", "must not be negative; got %d", r.GetBytes())
		case r.GetEndOffset() == r.GetStartOffset() && r.GetBytes() != 0:
			return invalid(field+".bytes", "must be 0 for an empty range; got %d", r.GetBytes())
		}
	}
	return nil
}
