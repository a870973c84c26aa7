package limit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Kind is how a limit is enforced.
type Kind int

const (
	// Count bounds the objects a tenant may have at once (topics,
	// partitions, groups, transactional ids), decided by the control plane.
	Count Kind = iota + 1
	// Rate bounds a rate over the whole cluster: the control plane divides
	// it among the brokers (controlplane/quota) and they enforce their parts
	// with token buckets (dataplane/quota). Its Def names its Dimension.
	Rate
	// Holding bounds what the tenant holds over the cluster, summed from the
	// brokers' reports (max_total_storage_bytes).
	Holding
	// Ceiling bounds one topic's config (retention.ms, retention.bytes,
	// max.message.bytes), checked by the control plane.
	Ceiling
	// Transaction bounds one transaction, at its transaction coordinator.
	Transaction
)

// Unit is what a limit's value counts.
type Unit int

const (
	Number       Unit = iota + 1 // things: Def.Noun names them
	Bytes                        // bytes
	Milliseconds                 // a duration in milliseconds
)

// Def is one row of the table: everything about a limit that is not the
// code that charges it.
type Def struct {
	// Name is the limit's one spelling: the JSON and proto field name, the
	// key of the proto's values maps, the QuotaFailure description and the
	// metrics' limit label; the CLI's flag is Name with '-' for '_'.
	Name string
	Kind Kind
	// Dimension is a Rate limit's dimension.
	Dimension Dimension
	Unit      Unit
	// Noun is what a Number counts, plural ("topics", "producer ids").
	Noun string
	// Per is a Rate limit's period: its value is per second or per hour.
	// The brokers' buckets and the quota exchange count per second.
	Per time.Duration
	// Label names the limit in the CLI's tenant get.
	Label string
	// Min and Max bound what an override may set (Max 0: int64's). A
	// Count may be 0 (the tenant may create nothing more); every other
	// limit must be positive, since a zero rate, retention, storage,
	// message size or transaction would make the tenant unusable —
	// suspend the tenant instead.
	Min, Max int64
	// Free and Pro are the plans' defaults.
	Free, Pro int64
	// Help is one line for the CLI's flag and the docs; Charge says what
	// the limit is charged on, and where.
	Help, Charge string
}

// String is the limit's name.
func (l Limit) String() string {
	if !l.Valid() {
		return fmt.Sprintf("limit(%d)", int(l))
	}
	return table[l].Name
}

// Valid reports whether l is one of the limits.
func (l Limit) Valid() bool { return l >= 0 && l < Limits }

// Def returns l's row. l must be valid.
func (l Limit) Def() Def { return table[l] }

// All returns every limit in table order.
func All() []Limit {
	out := make([]Limit, Limits)
	for i := range out {
		out[i] = Limit(i)
	}
	return out
}

// ByName returns the limit named name.
func ByName(name string) (Limit, bool) {
	for l := range Limits {
		if table[l].Name == name {
			return l, true
		}
	}
	return 0, false
}

// Default returns the limit's default on plan.
func (d Def) Default(plan string) (int64, bool) {
	switch plan {
	case PlanFree:
		return d.Free, true
	case PlanPro:
		return d.Pro, true
	}
	return 0, false
}

// max is the largest value an override may set.
func (d Def) max() int64 {
	if d.Max == 0 {
		return math.MaxInt64
	}
	return d.Max
}

// PerSecond converts a value of a Rate limit to a rate per second (an
// hour's 3,600 ids are 1 a second).
func (d Def) PerSecond(v float64) float64 {
	if d.Per <= 0 {
		return v
	}
	return v / d.Per.Seconds()
}

// FromPerSecond converts a rate per second to the limit's period.
func (d Def) FromPerSecond(v float64) float64 {
	if d.Per <= 0 {
		return v
	}
	return v * d.Per.Seconds()
}

// PerName is the limit's period as a word: "s", "hour".
func (d Def) PerName() string {
	switch d.Per {
	case time.Second:
		return "s"
	case time.Hour:
		return "hour"
	case time.Minute:
		return "min"
	}
	return d.Per.String()
}

// DimensionDef is one row of the rate dimensions' table.
type DimensionDef struct {
	// Name is the dimension's one spelling: the metrics' dimension label
	// and the key of the quota exchange's rates.
	Name string
	// Burst is how many seconds of its rate a broker's bucket holds;
	// 0: DefaultBurst.
	Burst time.Duration
}

// DefaultBurst is a broker's bucket burst in seconds of its rate, unless
// the dimension says otherwise: a tenant's burst over the cluster is a
// quarter of a second of its limit, split among the brokers as the
// allotments are. With 1 s, a tenant turning from idle to loud was
// admitted a second of its limit at once at every broker, plus the
// refill, and its neighbours' latency paid for it.
const DefaultBurst = 250 * time.Millisecond

// String is the dimension's name.
func (d Dimension) String() string {
	if d < 0 || d >= Dimensions {
		return "unknown"
	}
	return dimensions[d].Name
}

// Def returns d's row.
func (d Dimension) Def() DimensionDef { return dimensions[d] }

// Limit is the Rate limit of dimension d.
func (d Dimension) Limit() Limit { return rateLimits[d] }

// Burst is the brokers' bucket burst of d.
func (d Dimension) Burst() time.Duration {
	if b := dimensions[d].Burst; b > 0 {
		return b
	}
	return DefaultBurst
}

// DimensionByName returns the dimension named name.
func DimensionByName(name string) (Dimension, bool) {
	for d := range Dimensions {
		if dimensions[d].Name == name {
			return d, true
		}
	}
	return 0, false
}

// rateLimits maps each dimension to its Rate limit (init checks there is
// exactly one).
var rateLimits [Dimensions]Limit

func init() {
	seen := [Dimensions]bool{}
	names := map[string]bool{}
	for l := range Limits {
		d := table[l]
		if d.Name == "" || names[d.Name] || d.Kind == 0 || d.Unit == 0 {
			panic(fmt.Sprintf("limit: row %d has no name, a taken name, no kind or no unit", l))
		}
		names[d.Name] = true
		if d.Kind != Rate {
			continue
		}
		if d.Dimension < 0 || d.Dimension >= Dimensions || seen[d.Dimension] || d.Per <= 0 {
			panic(fmt.Sprintf("limit: rate %s has a bad or taken dimension, or no period", d.Name))
		}
		seen[d.Dimension] = true
		rateLimits[d.Dimension] = l
	}
	for d, ok := range seen {
		if !ok {
			panic(fmt.Sprintf("limit: dimension %s has no rate limit", Dimension(d)))
		}
	}
}

// ErrUnknownPlan is returned for a plan name that is not one of Plans().
var ErrUnknownPlan = errors.New("unknown plan")

// Values holds one value per limit: a tenant's limits in force (a plan's
// defaults with its overrides applied), or a plan's defaults. Index it by
// Limit. Its JSON form is an object keyed by the limits' names.
type Values [Limits]int64

// PlanValues returns plan's defaults, or an error wrapping ErrUnknownPlan.
func PlanValues(plan string) (Values, error) {
	var v Values
	for l := range Limits {
		d, ok := table[l].Default(plan)
		if !ok {
			return Values{}, fmt.Errorf("%w: %q (known: %s)", ErrUnknownPlan, plan, strings.Join(Plans(), ", "))
		}
		v[l] = d
	}
	return v, nil
}

// With returns v with every override of o replacing its value. It does not
// validate o.
func (v Values) With(o Overrides) Values {
	for l, x := range o {
		if l.Valid() {
			v[l] = x
		}
	}
	return v
}

// Rates returns the Rate limits as rates per second, by dimension.
func (v Values) Rates() [Dimensions]float64 {
	var r [Dimensions]float64
	for d := range Dimensions {
		l := d.Limit()
		r[d] = table[l].PerSecond(float64(v[l]))
	}
	return r
}

// MarshalJSON writes v as an object keyed by the limits' names, in table
// order.
func (v Values) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for l := range Limits {
		if l > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%d", table[l].Name, v[l])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object keyed by the limits' names; names it does
// not know are ignored, and limits it does not name are 0.
func (v *Values) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*v = Values{}
	for name, x := range m {
		if l, ok := ByName(name); ok {
			v[l] = x
		}
	}
	return nil
}

// Overrides are per-tenant exceptions to the plan's limits: a limit
// present replaces the plan's value. The JSON form is an object keyed by
// the limits' names naming only what differs (what the store keeps);
// names it does not know are ignored when read, as a document written by
// a newer version may hold some.
type Overrides map[Limit]int64

// Validate checks every override against its limit's range (Def.Min,
// Def.Max). The error names each bad limit and the allowed range.
func (o Overrides) Validate() error {
	var errs []error
	for _, l := range slices.Sorted(maps.Keys(o)) {
		x := o[l]
		if !l.Valid() {
			errs = append(errs, fmt.Errorf("%s: not a limit", l))
			continue
		}
		d := table[l]
		switch {
		case x < d.Min && d.Min == 0:
			errs = append(errs, fmt.Errorf("%s: must be >= 0, got %d", d.Name, x))
		case x < d.Min && d.Min == 1:
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %d", d.Name, x))
		case x < d.Min:
			errs = append(errs, fmt.Errorf("%s: must be >= %d, got %d", d.Name, d.Min, x))
		case x > d.max():
			errs = append(errs, fmt.Errorf("%s: must be <= %d, got %d", d.Name, d.max(), x))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid overrides: %w", err)
	}
	return nil
}

// MarshalJSON writes o as an object keyed by the limits' names, in table
// order.
func (o Overrides) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for l := range Limits {
		x, ok := o[l]
		if !ok {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "%q:%d", table[l].Name, x)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object keyed by the limits' names (null: none).
func (o *Overrides) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	out := Overrides{}
	for name, x := range m {
		if l, ok := ByName(name); ok {
			out[l] = x
		}
	}
	*o = out
	return nil
}
