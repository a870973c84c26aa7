package tenants

import (
	"errors"
	"fmt"
	"time"
)

// Plans a tenant can be on. Signup puts a tenant on PlanFree.
const (
	PlanFree = "free"
	PlanPro  = "pro"
)

// ErrUnknownPlan is returned for a plan name that is not one of Plans().
var ErrUnknownPlan = errors.New("unknown plan")

const (
	mib = 1 << 20
	gib = 1 << 30
	tib = 1 << 40
	day = 24 * time.Hour
)

// Limits are the effective quotas of one tenant: its plan's defaults with its Overrides applied.
// The control plane enforces the count limits (topics, partitions) and checks each topic's config
// against MaxRetentionMs, MaxStorageBytes (per partition, as retention.bytes) and MaxMessageBytes.
// The rates (ProduceBytesPerSec, FetchBytesPerSec, RequestsPerSec, ProducerIDsPerHour) hold for the
// whole cluster: the control plane divides each among the brokers (controlplane/quota) and the
// brokers enforce their parts with token buckets (dataplane/quota). MaxTotalStorageBytes,
// MaxTransactionalIDs and MaxGroups are decided by the control plane from the brokers' reports
// and the coordinators' reservations, and enforced by the brokers. MaxPartitionsPerTransaction and
// MaxGroupsPerTransaction bound one transaction, at its transaction coordinator.
// docs/quotas-and-billing.md says how and with what error bound.
type Limits struct {
	MaxTopics          int32 `json:"max_topics"`
	MaxPartitions      int32 `json:"max_partitions"` // total over all topics of the tenant
	MaxRetentionMs     int64 `json:"max_retention_ms"`
	MaxStorageBytes    int64 `json:"max_storage_bytes"`
	MaxMessageBytes    int32 `json:"max_message_bytes"`
	ProduceBytesPerSec int64 `json:"produce_bytes_per_sec"`
	FetchBytesPerSec   int64 `json:"fetch_bytes_per_sec"`
	RequestsPerSec     int32 `json:"requests_per_sec"`
	// MaxTotalStorageBytes bounds what the tenant holds, hot and cold, over all its partitions.
	MaxTotalStorageBytes int64 `json:"max_total_storage_bytes"`
	ProducerIDsPerHour   int32 `json:"producer_ids_per_hour"`
	MaxTransactionalIDs  int32 `json:"max_transactional_ids"`
	MaxGroups            int32 `json:"max_groups"`
	// MaxPartitionsPerTransaction and MaxGroupsPerTransaction bound one transaction: the
	// partitions it writes to and the groups whose offsets it commits. Its end writes a marker
	// to each, so they bound what an EndTransaction costs.
	MaxPartitionsPerTransaction int32 `json:"max_partitions_per_transaction"`
	MaxGroupsPerTransaction     int32 `json:"max_groups_per_transaction"`
}

// Overrides are per-tenant exceptions to the plan's Limits. A nil field keeps the plan's value.
// The JSON form omits unset fields, so a stored override document names only what differs.
type Overrides struct {
	MaxTopics          *int32 `json:"max_topics,omitempty"`
	MaxPartitions      *int32 `json:"max_partitions,omitempty"`
	MaxRetentionMs     *int64 `json:"max_retention_ms,omitempty"`
	MaxStorageBytes    *int64 `json:"max_storage_bytes,omitempty"`
	MaxMessageBytes    *int32 `json:"max_message_bytes,omitempty"`
	ProduceBytesPerSec *int64 `json:"produce_bytes_per_sec,omitempty"`
	FetchBytesPerSec   *int64 `json:"fetch_bytes_per_sec,omitempty"`
	RequestsPerSec     *int32 `json:"requests_per_sec,omitempty"`

	MaxTotalStorageBytes *int64 `json:"max_total_storage_bytes,omitempty"`
	ProducerIDsPerHour   *int32 `json:"producer_ids_per_hour,omitempty"`
	MaxTransactionalIDs  *int32 `json:"max_transactional_ids,omitempty"`
	MaxGroups            *int32 `json:"max_groups,omitempty"`

	MaxPartitionsPerTransaction *int32 `json:"max_partitions_per_transaction,omitempty"`
	MaxGroupsPerTransaction     *int32 `json:"max_groups_per_transaction,omitempty"`
}

var planLimits = map[string]Limits{
	PlanFree: {
		MaxTopics:          10,
		MaxPartitions:      30,
		MaxRetentionMs:     (7 * day).Milliseconds(),
		MaxStorageBytes:    10 * gib,
		MaxMessageBytes:    1 * mib,
		ProduceBytesPerSec: 5 * mib,
		FetchBytesPerSec:   10 * mib,
		RequestsPerSec:     500,

		MaxTotalStorageBytes: 50 * gib,
		ProducerIDsPerHour:   1000,
		MaxTransactionalIDs:  100,
		MaxGroups:            100,

		MaxPartitionsPerTransaction: 100,
		MaxGroupsPerTransaction:     10,
	},
	PlanPro: {
		MaxTopics:          1000,
		MaxPartitions:      3000,
		MaxRetentionMs:     (90 * day).Milliseconds(),
		MaxStorageBytes:    10 * tib,
		MaxMessageBytes:    8 * mib,
		ProduceBytesPerSec: 100 * mib,
		FetchBytesPerSec:   200 * mib,
		RequestsPerSec:     20000,

		MaxTotalStorageBytes: 100 * tib,
		ProducerIDsPerHour:   100000,
		MaxTransactionalIDs:  10000,
		MaxGroups:            10000,

		MaxPartitionsPerTransaction: 3000,
		MaxGroupsPerTransaction:     100,
	},
}

// Plans returns the known plan names, cheapest first. The slice is a fresh copy.
func Plans() []string {
	return []string{PlanFree, PlanPro}
}

// PlanLimits returns the default limits of plan, or an error wrapping ErrUnknownPlan.
func PlanLimits(plan string) (Limits, error) {
	l, ok := planLimits[plan]
	if !ok {
		return Limits{}, fmt.Errorf("%w: %q (known: free, pro)", ErrUnknownPlan, plan)
	}
	return l, nil
}

// ResolveLimits returns plan's limits with o applied, after validating o.
func ResolveLimits(plan string, o Overrides) (Limits, error) {
	l, err := PlanLimits(plan)
	if err != nil {
		return Limits{}, err
	}
	if err := o.Validate(); err != nil {
		return Limits{}, err
	}
	return l.With(o), nil
}

// With returns l with every set field of o replacing the plan value. It does not validate o.
func (l Limits) With(o Overrides) Limits {
	set(&l.MaxTopics, o.MaxTopics)
	set(&l.MaxPartitions, o.MaxPartitions)
	set(&l.MaxRetentionMs, o.MaxRetentionMs)
	set(&l.MaxStorageBytes, o.MaxStorageBytes)
	set(&l.MaxMessageBytes, o.MaxMessageBytes)
	set(&l.ProduceBytesPerSec, o.ProduceBytesPerSec)
	set(&l.FetchBytesPerSec, o.FetchBytesPerSec)
	set(&l.RequestsPerSec, o.RequestsPerSec)
	set(&l.MaxTotalStorageBytes, o.MaxTotalStorageBytes)
	set(&l.ProducerIDsPerHour, o.ProducerIDsPerHour)
	set(&l.MaxTransactionalIDs, o.MaxTransactionalIDs)
	set(&l.MaxGroups, o.MaxGroups)
	set(&l.MaxPartitionsPerTransaction, o.MaxPartitionsPerTransaction)
	set(&l.MaxGroupsPerTransaction, o.MaxGroupsPerTransaction)
	return l
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// MaxMessageBytesCeiling is the largest max_message_bytes any tenant may be given: records are
// framed, checksummed and replicated per batch in memory, so this bounds a broker's buffers.
const MaxMessageBytesCeiling = 64 * mib

// Validate checks the set fields of o. max_topics and max_partitions may be 0 (the tenant may
// create nothing more), and so may max_transactional_ids and max_groups; every other limit must
// be positive, since a zero rate, retention, storage, message size or transaction would make the
// tenant unusable — suspend the tenant instead.
// The error names the JSON field and the allowed range.
func (o Overrides) Validate() error {
	var errs []error
	nonNeg := func(name string, v *int32) {
		if v != nil && *v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be >= 0, got %d", name, *v))
		}
	}
	pos := func(name string, v *int64) {
		if v != nil && *v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %d", name, *v))
		}
	}
	pos32 := func(name string, v *int32) {
		if v != nil {
			pos(name, ptr(int64(*v)))
		}
	}
	nonNeg("max_topics", o.MaxTopics)
	nonNeg("max_partitions", o.MaxPartitions)
	pos("max_retention_ms", o.MaxRetentionMs)
	pos("max_storage_bytes", o.MaxStorageBytes)
	pos32("max_message_bytes", o.MaxMessageBytes)
	if o.MaxMessageBytes != nil && *o.MaxMessageBytes > MaxMessageBytesCeiling {
		errs = append(errs, fmt.Errorf("max_message_bytes: must be <= %d, got %d", MaxMessageBytesCeiling, *o.MaxMessageBytes))
	}
	pos("produce_bytes_per_sec", o.ProduceBytesPerSec)
	pos("fetch_bytes_per_sec", o.FetchBytesPerSec)
	pos32("requests_per_sec", o.RequestsPerSec)
	pos("max_total_storage_bytes", o.MaxTotalStorageBytes)
	pos32("producer_ids_per_hour", o.ProducerIDsPerHour)
	nonNeg("max_transactional_ids", o.MaxTransactionalIDs)
	nonNeg("max_groups", o.MaxGroups)
	pos32("max_partitions_per_transaction", o.MaxPartitionsPerTransaction)
	pos32("max_groups_per_transaction", o.MaxGroupsPerTransaction)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid overrides: %w", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// ErrLimitExceeded is matched (errors.Is) by every *LimitError.
var ErrLimitExceeded = errors.New("limit exceeded")

// LimitError reports a request that would take a tenant past one of its count limits. Limit is
// the JSON name of the Limits field ("max_topics"); Current is the usage the request would reach.
type LimitError struct {
	Limit   string
	Current int64
	Max     int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s exceeded: %d > %d", e.Limit, e.Current, e.Max)
}

// Is makes errors.Is(err, ErrLimitExceeded) true for every *LimitError.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

// CheckTopics returns a *LimitError when a tenant that has current topics may not create adding more.
func (l Limits) CheckTopics(current, adding int64) error {
	return checkCount("max_topics", current, adding, int64(l.MaxTopics))
}

// CheckPartitions returns a *LimitError when a tenant that has current partitions (over all its
// topics) may not add adding more.
func (l Limits) CheckPartitions(current, adding int64) error {
	return checkCount("max_partitions", current, adding, int64(l.MaxPartitions))
}

func checkCount(limit string, current, adding, limitMax int64) error {
	if current+adding > limitMax {
		return &LimitError{Limit: limit, Current: current + adding, Max: limitMax}
	}
	return nil
}
