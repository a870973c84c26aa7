package tenants

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/limit"
)

// Plans a tenant can be on (the limit table's). Signup puts a tenant on PlanFree.
const (
	PlanFree = limit.PlanFree
	PlanPro  = limit.PlanPro
)

// ErrUnknownPlan is returned for a plan name that is not one of Plans().
var ErrUnknownPlan = limit.ErrUnknownPlan

// Limits are the effective quotas of one tenant: its plan's defaults with its Overrides applied,
// one value per row of the limit table (package limit says what each is and how it is
// enforced; docs/quotas-and-billing.md says with what error bound). Index them by limit.Limit.
type Limits = limit.Values

// Overrides are per-tenant exceptions to the plan's Limits: a limit present replaces the plan's
// value. The JSON form names only what differs, by the limits' names.
type Overrides = limit.Overrides

// Plans returns the known plan names, cheapest first. The slice is a fresh copy.
func Plans() []string { return limit.Plans() }

// PlanLimits returns the default limits of plan, or an error wrapping ErrUnknownPlan.
func PlanLimits(plan string) (Limits, error) { return limit.PlanValues(plan) }

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

// MaxMessageBytesCeiling is the largest max_message_bytes any tenant may be given: records are
// framed, checksummed and replicated per batch in memory, so this bounds a broker's buffers.
const MaxMessageBytesCeiling = limit.MaxMessageBytesCeiling

// ErrLimitExceeded is matched (errors.Is) by every *LimitError.
var ErrLimitExceeded = errors.New("limit exceeded")

// LimitError reports a request that would take a tenant past one of its count limits. Limit is
// the limit's name ("max_topics"); Current is the usage the request would reach.
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

// CheckCount returns a *LimitError when a tenant with limits l that has current of what the
// count limit c bounds (topics; partitions over all its topics) may not add adding more.
func CheckCount(l Limits, c limit.Limit, current, adding int64) error {
	if current+adding > l[c] {
		return &LimitError{Limit: c.String(), Current: current + adding, Max: l[c]}
	}
	return nil
}
