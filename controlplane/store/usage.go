package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"time"

	"github.com/sluicemq/sluice/limit"
)

// Usage metering (issue 17, docs/quotas-and-billing.md): the hourly usage
// rows billing prices, the exactly-once application of brokers' usage
// reports, the control plane's own interval meters, and the brokers' quota
// reports the control plane divides rate limits by.
//
// Every amount is an int64 in the dimension's base unit (bytes, requests,
// byte-seconds, partition-seconds) and never negative. One hourly row holds
// at most math.MaxInt64 (a petabyte held for an hour is 3.6e18
// byte-seconds); sums over longer periods are billing's, in wider
// arithmetic.
//
// # Exactly once
//
// A broker's counters (egress bytes, requests) are applied once per
// (broker id, broker epoch, sequence): the key is recorded in the same
// transaction that adds the counters, so a retry of a report whose answer
// was lost is answered duplicate and adds nothing. Ingress is derived from
// the log: per partition the store keeps the offset metering has reached
// (its cursor) and applies a range only when it starts exactly there,
// moving the cursor to the range's end in the same transaction as adding
// the range's bytes (a compare-and-set on the cursor, so two brokers
// reporting the same offsets at once count them once). A control-plane
// meter (AdvanceMeter) is a compare-and-set on the end of the interval it
// last counted, in the transaction that adds the interval's amounts, so
// replicas advancing it at once count each interval once.

// UsageDimension is a metered dimension, as stored. The values name the
// proto's UsageDimension without its prefix, in lower case.
type UsageDimension string

// The usage dimensions, in the proto's order (UsageDimensions lists them).
const (
	UsageIngressBytes           UsageDimension = "ingress_bytes"
	UsageEgressBytes            UsageDimension = "egress_bytes"
	UsageRequests               UsageDimension = "requests"
	UsageHotStorageByteSeconds  UsageDimension = "hot_storage_byte_seconds"
	UsageColdStorageByteSeconds UsageDimension = "cold_storage_byte_seconds"
	UsagePartitionSeconds       UsageDimension = "partition_seconds"
)

// UsageDimensions returns every dimension in the proto's order (its enum
// numbers 1..6).
func UsageDimensions() []UsageDimension {
	return []UsageDimension{UsageIngressBytes, UsageEgressBytes, UsageRequests,
		UsageHotStorageByteSeconds, UsageColdStorageByteSeconds, UsagePartitionSeconds}
}

// Valid reports whether d is one of UsageDimensions.
func (d UsageDimension) Valid() bool { return slices.Contains(UsageDimensions(), d) }

// Order is d's position in UsageDimensions (1 for ingress, as the proto's
// enum numbers), or 0 for an unknown dimension.
func (d UsageDimension) Order() int { return slices.Index(UsageDimensions(), d) + 1 }

// UsageRow is one hourly usage row: what a tenant used of one dimension in
// the hour starting at Hour (UTC, on the hour).
type UsageRow struct {
	TenantID  string
	Hour      time.Time
	Dimension UsageDimension
	Amount    int64
}

// UsageTotal is a tenant's sum of one dimension over a range of hours.
type UsageTotal struct {
	TenantID  string
	Dimension UsageDimension
	Amount    *big.Int
}

// UsageAmount is an amount of one dimension a meter adds for one tenant.
type UsageAmount struct {
	TenantID  string
	Dimension UsageDimension
	Amount    int64
}

// UsageCounters are one broker's counters of one tenant since its previous
// report.
type UsageCounters struct {
	TenantID    string
	EgressBytes int64
	Requests    int64
}

// IngressRange is a run of consecutive batches of one partition's log,
// [StartOffset, EndOffset), below its high watermark, reported by the
// partition's leader of LeaderEpoch; Bytes is the sum of the data batches'
// sizes in it. StartOffset == EndOffset (and Bytes 0) only asks where
// metering stands.
type IngressRange struct {
	TopicID     string
	Partition   int32
	LeaderEpoch int32
	StartOffset int64
	EndOffset   int64
	Bytes       int64
}

// UsageReport is one ReportUsage call. At is when the control plane applies
// it: the usage lands in the hour of At.
type UsageReport struct {
	BrokerID    int32
	BrokerEpoch int64
	Sequence    int64
	At          time.Time
	Counters    []UsageCounters
	Ingress     []IngressRange
}

// IngressCursor is where ingress metering of one partition stands: every
// offset below NextOffset is metered.
type IngressCursor struct {
	TopicID     string
	Partition   int32
	LeaderEpoch int32 // the newest leader epoch that named the partition
	NextOffset  int64
}

// UsageReportResult is ApplyUsageReport's answer.
type UsageReportResult struct {
	// Duplicate: the report's key had been applied before; nothing was now.
	Duplicate bool
	// Cursors of every partition the report named whose topic exists,
	// ordered by topic id and partition, as they stand after the report.
	Cursors []IngressCursor
}

// MaxUsageReportRanges and MaxUsageReportTenants bound one report.
const (
	MaxUsageReportRanges  = 10000
	MaxUsageReportTenants = 10000
)

// UsageReportWindow is how many sequences below the newest applied one of a
// broker epoch the store remembers: a report further behind (a broker keeps
// a few in flight at most) is answered Duplicate without being applied.
const UsageReportWindow = 4096

// CheckUsageReport validates a report and returns it with canonical ids.
// Counters of one tenant named twice are refused, as are negative amounts,
// ranges with EndOffset < StartOffset, negative offsets or bytes, bytes in
// an empty range, and a sequence below 1.
func CheckUsageReport(r UsageReport) (UsageReport, error) {
	bad := func(format string, args ...any) (UsageReport, error) {
		return UsageReport{}, fmt.Errorf("invalid usage report: %s", fmt.Sprintf(format, args...))
	}
	switch {
	case r.BrokerID < 0:
		return bad("broker id %d", r.BrokerID)
	case r.BrokerEpoch < 1:
		return bad("broker epoch %d", r.BrokerEpoch)
	case r.Sequence < 1:
		return bad("sequence %d is not positive", r.Sequence)
	case r.At.IsZero():
		return bad("no time")
	case len(r.Counters) > MaxUsageReportTenants:
		return bad("%d tenants, at most %d", len(r.Counters), MaxUsageReportTenants)
	case len(r.Ingress) > MaxUsageReportRanges:
		return bad("%d ingress ranges, at most %d", len(r.Ingress), MaxUsageReportRanges)
	}
	out := r
	out.Counters = make([]UsageCounters, len(r.Counters))
	seen := map[string]bool{}
	for i, c := range r.Counters {
		id, err := CheckNewID("tenant", c.TenantID)
		if err != nil {
			return bad("%v", err)
		}
		if seen[id] {
			return bad("tenant %s named twice", id)
		}
		seen[id] = true
		if c.EgressBytes < 0 || c.Requests < 0 {
			return bad("negative counters of tenant %s", id)
		}
		c.TenantID = id
		out.Counters[i] = c
	}
	out.Ingress = make([]IngressRange, len(r.Ingress))
	for i, g := range r.Ingress {
		id, err := CheckNewID("topic", g.TopicID)
		if err != nil {
			return bad("%v", err)
		}
		switch {
		case g.Partition < 0:
			return bad("partition %d", g.Partition)
		case g.LeaderEpoch < 0:
			return bad("leader epoch %d", g.LeaderEpoch)
		case g.StartOffset < 0 || g.EndOffset < g.StartOffset:
			return bad("range [%d, %d) of %s/%d", g.StartOffset, g.EndOffset, id, g.Partition)
		case g.Bytes < 0 || (g.Bytes > 0 && g.EndOffset == g.StartOffset):
			return bad("%d bytes in range [%d, %d) of %s/%d", g.Bytes, g.StartOffset, g.EndOffset, id, g.Partition)
		}
		g.TopicID = id
		out.Ingress[i] = g
	}
	return out, nil
}

// DecideIngressRange decides one range against the partition's cursor, read
// inside the report's transaction (found false: never metered): apply it
// (then the cursor becomes next), or not. A range from an older leader
// epoch than the cursor's is refused; a never-metered partition accepts the
// first range's start; otherwise the range must start at the cursor. An
// empty range is never applied, but starts the cursor of a never-metered
// partition (at its offset) and raises a cursor's epoch like any range.
func DecideIngressRange(cur IngressCursor, found bool, g IngressRange) (next IngressCursor, apply bool) {
	if !found {
		return IngressCursor{TopicID: g.TopicID, Partition: g.Partition, LeaderEpoch: g.LeaderEpoch, NextOffset: g.EndOffset}, g.EndOffset > g.StartOffset
	}
	if g.LeaderEpoch < cur.LeaderEpoch {
		return cur, false
	}
	next = cur
	next.LeaderEpoch = g.LeaderEpoch
	if g.StartOffset != cur.NextOffset || g.EndOffset == g.StartOffset {
		return next, false
	}
	next.NextOffset = g.EndOffset
	return next, true
}

// HourOf returns the start of t's hour in UTC.
func HourOf(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// CheckUsageAmounts validates a meter's amounts: UUID tenants, known
// dimensions, no negative amount. Returns them with canonical ids.
func CheckUsageAmounts(amounts []UsageAmount) ([]UsageAmount, error) {
	out := make([]UsageAmount, 0, len(amounts))
	for _, a := range amounts {
		id, err := CheckNewID("tenant", a.TenantID)
		if err != nil {
			return nil, fmt.Errorf("invalid usage amount: %w", err)
		}
		if !a.Dimension.Valid() {
			return nil, fmt.Errorf("invalid usage amount: dimension %q", a.Dimension)
		}
		if a.Amount < 0 {
			return nil, fmt.Errorf("invalid usage amount: %d %s of tenant %s", a.Amount, a.Dimension, id)
		}
		a.TenantID = id
		out = append(out, a)
	}
	return out, nil
}

// MeterPiece is one hour-aligned piece of a meter's interval: [From, To),
// within one UTC hour.
type MeterPiece struct{ From, To time.Time }

// MaxMeterPieces bounds the pieces of one AdvanceMeter: a meter last
// advanced longer ago (the control plane down for more than 62 days) starts
// again from now, counting nothing for the gap.
const MaxMeterPieces = 62 * 24

// MeterPieces splits [from, to) at UTC hour boundaries (nil when to is not
// after from, or the interval has more than MaxMeterPieces pieces).
func MeterPieces(from, to time.Time) []MeterPiece {
	from, to = from.UTC().Truncate(time.Millisecond), to.UTC().Truncate(time.Millisecond)
	if !to.After(from) || to.Sub(from) > MaxMeterPieces*time.Hour {
		return nil
	}
	var out []MeterPiece
	for cur := from; cur.Before(to); {
		end := HourOf(cur).Add(time.Hour)
		if end.After(to) {
			end = to
		}
		out = append(out, MeterPiece{From: cur, To: end})
		cur = end
	}
	return out
}

// MeterResult is what AdvanceMeter did.
type MeterResult struct {
	// Advanced: the meter moved from From to To and the amounts were added;
	// false when another replica advanced it first (nothing added), or it
	// was started now (a new meter counts from its first call).
	Advanced bool
	From, To time.Time
}

// QuotaRates are per-second rates of one tenant at one broker (the proto's
// QuotaRates), one per rate dimension of the limit table. Stored as a JSON
// object keyed by the dimensions' names (quota_reports.offered, admitted),
// so a new dimension needs no migration.
type QuotaRates [limit.Dimensions]float64

// MarshalJSON writes r as an object keyed by the dimensions' names.
func (r QuotaRates) MarshalJSON() ([]byte, error) {
	m := make(map[string]float64, len(r))
	for d := range limit.Dimensions {
		m[d.String()] = r[d]
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads an object keyed by the dimensions' names; a
// dimension it does not name is 0, a name it does not know is ignored.
func (r *QuotaRates) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*r = QuotaRates{}
	for name, v := range m {
		if d, ok := limit.DimensionByName(name); ok {
			r[d] = v
		}
	}
	return nil
}

// QuotaReport is one broker's latest ExchangeQuotas entry for one tenant:
// soft state, replaced by the broker's next report.
type QuotaReport struct {
	BrokerID         int32
	TenantID         string
	At               time.Time
	Offered          QuotaRates
	Admitted         QuotaRates
	HotStorageBytes  int64
	Groups           int32
	TransactionalIDs int32
}

// MaxQuotaReportTenants bounds one PutQuotaReports.
const MaxQuotaReportTenants = 100000

// CheckQuotaReports validates one broker's reports: UUID tenants each named
// once, finite non-negative rates and counts. Returns them with canonical
// ids, BrokerID and At set.
func CheckQuotaReports(brokerID int32, at time.Time, reports []QuotaReport) ([]QuotaReport, error) {
	if brokerID < 0 || at.IsZero() || len(reports) > MaxQuotaReportTenants {
		return nil, fmt.Errorf("invalid quota reports: broker %d, time %v, %d tenants", brokerID, at, len(reports))
	}
	finite := func(r QuotaRates) bool {
		for _, v := range r {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return false
			}
		}
		return true
	}
	out := make([]QuotaReport, 0, len(reports))
	seen := map[string]bool{}
	for _, r := range reports {
		id, err := CheckNewID("tenant", r.TenantID)
		if err != nil {
			return nil, fmt.Errorf("invalid quota report: %w", err)
		}
		if seen[id] {
			return nil, fmt.Errorf("invalid quota reports: tenant %s named twice", id)
		}
		seen[id] = true
		if !finite(r.Offered) || !finite(r.Admitted) || r.HotStorageBytes < 0 || r.Groups < 0 || r.TransactionalIDs < 0 {
			return nil, fmt.Errorf("invalid quota report of tenant %s: negative or non-finite values", id)
		}
		r.BrokerID, r.TenantID, r.At = brokerID, id, at.UTC().Truncate(time.Millisecond)
		out = append(out, r)
	}
	return out, nil
}

// UsageStore is the part of Store that meters usage (usage.go) and keeps
// prices and invoices (billing.go). The methods taking no tenant are for
// the control plane's own loops and the brokers' calls, never for answering
// a tenant.
type UsageStore interface {
	// ApplyUsageReport applies a broker's report (CheckUsageReport validates it) in one
	// transaction, and answers whether it was a duplicate and where every partition it named
	// stands. The broker (BrokerID, BrokerEpoch) must be registered at that epoch: an
	// unknown broker → ErrNotFound, another epoch → ErrConflict, and nothing is applied. The
	// key (broker, epoch, sequence) applied before, or more than UsageReportWindow sequences
	// below the newest applied of the epoch → Duplicate, nothing applied (the cursors are
	// still answered). Otherwise it records the key (forgetting the keys of the broker's
	// older epochs and those out of the window), adds each tenant's counters to its hourly
	// rows of HourOf(At) (egress bytes, requests; zeros add no row), and decides each
	// ingress range, in order, by DecideIngressRange against the partition's cursor: an
	// applied range moves the cursor and adds its bytes to the ingress row of the topic's
	// tenant. A range of a partition that does not exist (its topic deleted, never created)
	// is skipped, its partition left out of the cursors (and its cursor forgotten). Concurrent reports naming one partition apply
	// each offset once.
	ApplyUsageReport(ctx context.Context, r UsageReport) (UsageReportResult, error)
	// AdvanceMeter counts one control-plane meter (its name: "hot_storage", "partitions",
	// ...) up to now, exactly once across replicas. The first call for a name starts the
	// meter at now and counts nothing. Later calls split [last, now) into MeterPieces and
	// call compute once per piece, outside any transaction (compute reads what it needs; it
	// must not write to the store), then, in one transaction, move the meter from last to now
	// (compare-and-set: when another caller moved it first, nothing is added and Advanced
	// is false) and add every piece's amounts (CheckUsageAmounts) to the hourly rows of the
	// piece's hour. now not after last counts nothing. An error from compute is returned
	// and nothing is added; a gap longer than MaxMeterPieces hours is skipped (the meter
	// moves to now, counting nothing).
	AdvanceMeter(ctx context.Context, meter string, now time.Time, compute func(from, to time.Time) ([]UsageAmount, error)) (MeterResult, error)
	// ListUsage returns the tenant's hourly rows of the hours that overlap [from, to) (from
	// HourOf(from) up to, not including, to), ordered by hour and then dimension order.
	// Another tenant's or an unknown tenant has none.
	ListUsage(ctx context.Context, tenantID string, from, to time.Time) ([]UsageRow, error)
	// ListUsageTenants returns the ids of the tenants with a usage row of an hour that
	// overlaps [from, to), sorted.
	ListUsageTenants(ctx context.Context, from, to time.Time) ([]string, error)
	// UsageTotals returns every tenant's sum of each dimension over the hours that overlap
	// [from, to), exactly (a month of byte-seconds can pass int64), ordered by tenant id and
	// dimension order; dimensions a tenant has no row of are absent. One read for every
	// tenant: what the billing job prices.
	UsageTotals(ctx context.Context, from, to time.Time) ([]UsageTotal, error)

	// PutQuotaReports replaces what the store holds of broker brokerID's quota reports with
	// reports (CheckQuotaReports validates them), all stamped at: a tenant the broker no
	// longer names has no report of it any more. In the same transaction it ends the
	// reservations applied confirms (CheckConfirmations validates them): the pending name of
	// each (tenant, kind, name) reserved by brokerID with that token is dropped (one reserved
	// again since, with another token, stays); expired ones are dropped by ReserveObjects.
	// Every reservation decided after it commits sees the reports and the pending names as
	// they stand after it, never one without the other.
	PutQuotaReports(ctx context.Context, brokerID int32, at time.Time, reports []QuotaReport, applied []ObjectReservation) error
	// ReserveObjects decides a tenant's reservations (CheckReservations validates them)
	// with DecideReservations, in one transaction that holds the tenant row's lock (as
	// topic creation does), so that concurrent calls, on any control-plane replica, decide
	// one after another: reported is the sum of the tenant's quota reports stamped after
	// r.ReportedAfter, pending its reservations expiring after r.At, both read under the
	// tenant row's lock (a PutQuotaReports commits its reports and confirmations together, so
	// the reads never see one without the other). A granted name is stored as reserved by r.BrokerID with its token until
	// r.At + r.TTL (replacing the broker, token and expiry of a name pending already). The
	// tenant's expired reservations are dropped. An unknown tenant → ErrNotFound.
	ReserveObjects(ctx context.Context, r Reservations) ([]ReservationResult, error)
	// ListQuotaReports returns the quota reports stamped at or after since, of the tenants
	// named (every tenant when tenantIDs is empty), ordered by tenant id and broker id.
	ListQuotaReports(ctx context.Context, tenantIDs []string, since time.Time) ([]QuotaReport, error)

	// ColdStorageBytes returns, per tenant, the bytes of its remote segments in state
	// RemoteCopyFinished (copied and not being deleted); tenants with none, and the system
	// tenant (whose internal topics nobody pays for), are absent.
	ColdStorageBytes(ctx context.Context) (map[string]int64, error)
	// PartitionCounts returns, per tenant, the partitions of its topics; tenants with none,
	// and the system tenant, are absent.
	PartitionCounts(ctx context.Context) (map[string]int64, error)

	// BillingStore: plan prices and invoices (billing.go).
	BillingStore
}
