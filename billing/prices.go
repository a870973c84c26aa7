package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants"
)

// ErrInvalidPrice marks a price SetPlanPrices refuses (an unknown plan or
// dimension, a negative price or allowance, a unit that is not the
// dimension's): the API answers INVALID_ARGUMENT.
var ErrInvalidPrice = errors.New("invalid price")

// Currency is the currency of the default prices.
const Currency = "USD"

// minorExponent is the number of minor-unit digits of each currency
// accepted.
var minorExponent = map[string]int{"USD": 2, "EUR": 2, "GBP": 2, "CHF": 2, "JPY": 0}

// MicrosPerMinor returns how many micros of currency make one minor unit
// (10,000 for cents), or an error for a currency billing does not know.
func MicrosPerMinor(currency string) (int64, error) {
	e, ok := minorExponent[currency]
	if !ok {
		return 0, fmt.Errorf("%w: unknown currency %q", ErrInvalidPrice, currency)
	}
	m := int64(1_000_000)
	for range e {
		m /= 10
	}
	return m, nil
}

// Billing units. A GiB is 2^30 bytes; a month, in GiB-month, is 30 days.
const (
	GiB           = int64(1) << 30
	MonthSeconds  = int64(30 * 24 * 3600)
	GiBMonth      = GiB * MonthSeconds // byte-seconds
	MillionReqs   = int64(1_000_000)
	PartitionHour = int64(3600) // partition-seconds
)

// Unit is a dimension's billing unit.
type Unit struct {
	Name string
	Size int64 // base units in one
}

// Units returns each dimension's fixed billing unit.
func Units() map[store.UsageDimension]Unit {
	return map[store.UsageDimension]Unit{
		store.UsageIngressBytes:           {"GiB", GiB},
		store.UsageEgressBytes:            {"GiB", GiB},
		store.UsageRequests:               {"million requests", MillionReqs},
		store.UsageHotStorageByteSeconds:  {"GiB-month", GiBMonth},
		store.UsageColdStorageByteSeconds: {"GiB-month", GiBMonth},
		store.UsagePartitionSeconds:       {"partition-hour", PartitionHour},
	}
}

func price(d store.UsageDimension, micros, free int64) store.Price {
	u := Units()[d]
	return store.Price{Dimension: d, Unit: u.Name, UnitSize: u.Size, UnitPriceMicros: micros, FreeQuantity: free}
}

// DefaultPrices returns a plan's default prices (USD), in dimension order,
// or an error wrapping tenants.ErrUnknownPlan.
//
//	dimension      unit              free: price, free a month    pro: price, free a month
//	ingress        GiB               $0.10, 10 GiB                $0.05, 100 GiB
//	egress         GiB               $0.09, 10 GiB                $0.04, 100 GiB
//	requests       million requests  $0.20, 10 million            $0.10, 100 million
//	hot storage    GiB-month         $0.10, 1 GiB-month           $0.08, 10 GiB-month
//	cold storage   GiB-month         $0.023, 5 GiB-month          $0.02, 50 GiB-month
//	partitions     partition-hour    $0.0015, 720 partition-hours $0.001, 7,200 partition-hours
func DefaultPrices(plan string) (store.PlanPrices, error) {
	var ps []store.Price
	switch plan {
	case tenants.PlanFree:
		ps = []store.Price{
			price(store.UsageIngressBytes, 100_000, 10*GiB),
			price(store.UsageEgressBytes, 90_000, 10*GiB),
			price(store.UsageRequests, 200_000, 10*MillionReqs),
			price(store.UsageHotStorageByteSeconds, 100_000, GiBMonth),
			price(store.UsageColdStorageByteSeconds, 23_000, 5*GiBMonth),
			price(store.UsagePartitionSeconds, 1_500, 720*PartitionHour),
		}
	case tenants.PlanPro:
		ps = []store.Price{
			price(store.UsageIngressBytes, 50_000, 100*GiB),
			price(store.UsageEgressBytes, 40_000, 100*GiB),
			price(store.UsageRequests, 100_000, 100*MillionReqs),
			price(store.UsageHotStorageByteSeconds, 80_000, 10*GiBMonth),
			price(store.UsageColdStorageByteSeconds, 20_000, 50*GiBMonth),
			price(store.UsagePartitionSeconds, 1_000, 7_200*PartitionHour),
		}
	default:
		_, err := tenants.PlanLimits(plan)
		return store.PlanPrices{}, err
	}
	return store.PlanPrices{Plan: plan, Currency: Currency, Prices: ps}, nil
}

// Prices returns every plan's effective prices (tenants.Plans order): the
// defaults, overlaid per dimension with those an operator stored, in the
// stored currency when one was. UpdatedAt is the stored prices' (zero for
// pure defaults). Stored prices of plans that no longer exist are ignored.
func Prices(ctx context.Context, st store.BillingStore) ([]store.PlanPrices, error) {
	stored, err := st.GetPlanPrices(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan prices: %w", err)
	}
	byPlan := map[string]store.PlanPrices{}
	for _, p := range stored {
		byPlan[p.Plan] = p
	}
	var out []store.PlanPrices
	for _, plan := range tenants.Plans() {
		p, err := DefaultPrices(plan)
		if err != nil {
			return nil, err
		}
		if s, ok := byPlan[plan]; ok {
			p = overlay(p, s)
		}
		out = append(out, p)
	}
	return out, nil
}

// PlanPrices returns one plan's effective prices (see Prices).
func PlanPrices(ctx context.Context, st store.BillingStore, plan string) (store.PlanPrices, error) {
	all, err := Prices(ctx, st)
	if err != nil {
		return store.PlanPrices{}, err
	}
	for _, p := range all {
		if p.Plan == plan {
			return p, nil
		}
	}
	_, err = tenants.PlanLimits(plan)
	return store.PlanPrices{}, err
}

func overlay(def, stored store.PlanPrices) store.PlanPrices {
	out := def
	out.Prices = append([]store.Price(nil), def.Prices...)
	out.Currency, out.UpdatedAt = stored.Currency, stored.UpdatedAt
	for _, s := range stored.Prices {
		for i := range out.Prices {
			if out.Prices[i].Dimension == s.Dimension {
				out.Prices[i] = s
			}
		}
	}
	return out
}

// CheckPrices validates prices an operator sets for plan: a known plan,
// known dimensions each once, the dimension's unit and unit size (an empty
// unit and a zero size take the dimension's), no negative price or
// allowance. Returns the prices completed, or an error wrapping
// ErrInvalidPrice.
func CheckPrices(plan string, prices []store.Price) ([]store.Price, error) {
	if _, err := tenants.PlanLimits(plan); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPrice, err)
	}
	units := Units()
	seen := map[store.UsageDimension]bool{}
	out := make([]store.Price, 0, len(prices))
	for _, p := range prices {
		u, ok := units[p.Dimension]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: unknown dimension %q", ErrInvalidPrice, p.Dimension)
		case seen[p.Dimension]:
			return nil, fmt.Errorf("%w: dimension %s named twice", ErrInvalidPrice, p.Dimension)
		case p.UnitPriceMicros < 0 || p.FreeQuantity < 0:
			return nil, fmt.Errorf("%w: negative price or allowance of %s", ErrInvalidPrice, p.Dimension)
		}
		seen[p.Dimension] = true
		if p.Unit == "" {
			p.Unit = u.Name
		}
		if p.UnitSize == 0 {
			p.UnitSize = u.Size
		}
		if p.Unit != u.Name || p.UnitSize != u.Size {
			return nil, fmt.Errorf("%w: %s is priced per %s of %d, not %q of %d", ErrInvalidPrice, p.Dimension, u.Name, u.Size, p.Unit, p.UnitSize)
		}
		out = append(out, p)
	}
	return out, nil
}

// SetPlanPrices validates (CheckPrices) and stores prices for plan,
// keeping the plan's other dimensions and its currency, and returns the
// plan's effective prices afterwards. Drafts follow at the job's next run;
// finalized invoices keep the prices they were computed with.
func SetPlanPrices(ctx context.Context, st store.BillingStore, plan string, prices []store.Price, now time.Time) (store.PlanPrices, error) {
	checked, err := CheckPrices(plan, prices)
	if err != nil {
		return store.PlanPrices{}, err
	}
	cur, err := PlanPrices(ctx, st, plan)
	if err != nil {
		return store.PlanPrices{}, err
	}
	if _, err := st.SetPlanPrices(ctx, store.PlanPrices{Plan: plan, Currency: cur.Currency, Prices: checked}, now); err != nil {
		return store.PlanPrices{}, fmt.Errorf("set plan prices: %w", err)
	}
	return PlanPrices(ctx, st, plan)
}
