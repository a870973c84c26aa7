package admission

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/quota"
	"github.com/sluicemq/sluice/limit"
)

// metrics are the quota enforcement's metrics. The tenant label of the
// per-tenant ones is bounded: the quotaTenantLabels tenants throttled
// longest in the last exchange window have their own, the rest are
// "other" (Enforcer.relabel).
type metrics struct {
	// By dimension (produce_bytes, fetch_bytes, requests, producer_ids).
	throttled, throttleSeconds *prometheus.CounterVec
	// By tenant and dimension.
	tenantThrottled, tenantThrottleSeconds *prometheus.CounterVec
	// refused: count refusals by limit (max_total_storage_bytes,
	// max_groups, max_transactional_ids).
	refused *prometheus.CounterVec
	// allotment: this broker's allotments summed over the tenants, by
	// dimension.
	allotment *prometheus.GaugeVec
	// reservations: new groups and transactional ids this broker's
	// coordinators reserved, by kind and result (reserve.go).
	reservations *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "quota_throttled_requests_total",
			Help: "Requests refused (ResourceExhausted with a retry delay) because their tenant was over this broker's allotment of a rate limit, by dimension: produce_bytes, fetch_bytes, requests, producer_ids.",
		}, []string{"dimension"}),
		throttleSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "quota_throttle_seconds_total",
			Help: "Sum of the retry delays given with rate refusals, by dimension: how long throttled clients were asked to wait.",
		}, []string{"dimension"}),
		tenantThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "quota_tenant_throttled_requests_total",
			Help: "Rate refusals by tenant and dimension. Only the 20 tenants throttled longest in the last quota exchange window have their own tenant label (a tenant's series goes when it loses it); the others count as tenant=\"other\".",
		}, []string{"tenant", "dimension"}),
		tenantThrottleSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "quota_tenant_throttle_seconds_total",
			Help: "Retry delays given with rate refusals by tenant and dimension, with the tenant label bounded as sluice_broker_quota_tenant_throttled_requests_total's.",
		}, []string{"tenant", "dimension"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "quota_limit_refusals_total",
			Help: "Requests refused (ResourceExhausted, no retry delay) because their tenant was at a count limit, by limit: max_total_storage_bytes (produce), max_groups (a new group), max_transactional_ids (a new transactional id).",
		}, []string{"limit"}),
		allotment: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "quota_allotment",
			Help: "This broker's allotments of the tenants' rate limits from the last quota exchange, summed over the tenants, per second, by dimension (producer_ids: ids per second).",
		}, []string{"dimension"}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "count_reservations_total",
			Help: "New groups and transactional ids the coordinators on this broker reserved at the control plane before creating them (max_groups, max_transactional_ids), by kind (group, transactional_id) and result: granted, refused (at the limit), unreserved (the control plane could not be reached: admitted without a reservation).",
		}, []string{"kind", "result"}),
	}
	for d := range quota.Dimensions {
		dim := quota.Dimension(d).String()
		m.throttled.WithLabelValues(dim)
		m.throttleSeconds.WithLabelValues(dim)
		m.allotment.WithLabelValues(dim)
	}
	for _, l := range []limit.Limit{limit.MaxTotalStorageBytes, limit.MaxGroups, limit.MaxTransactionalIDs} {
		m.refused.WithLabelValues(l.String())
	}
	for _, k := range []string{"group", "transactional_id"} {
		for _, r := range []string{"granted", "refused", "unreserved"} {
			m.reservations.WithLabelValues(k, r)
		}
	}
	reg.MustRegister(m.throttled, m.throttleSeconds, m.tenantThrottled, m.tenantThrottleSeconds, m.refused, m.allotment, m.reservations)
	return m
}

// forget deletes a tenant's per-tenant series (it lost its own label).
func (m *metrics) forget(tenantID string) {
	m.tenantThrottled.DeletePartialMatch(prometheus.Labels{"tenant": tenantID})
	m.tenantThrottleSeconds.DeletePartialMatch(prometheus.Labels{"tenant": tenantID})
}
