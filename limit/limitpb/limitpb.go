// Package limitpb carries the limit table's values in the proto
// (sluice.v1.Limits, LimitOverrides and QuotaRates): every limit is in the
// message's values map under its name, and also in the typed field of that
// name where the message has one (the limits and dimensions that existed
// before the maps, kept for clients and brokers that read them). Reading
// takes the map, and a typed field for what the map lacks (a message from
// a version before the maps). So a new limit or dimension needs no change
// here or in the proto.
package limitpb

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/reflect/protoreflect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
)

// typed is, per limit, the field of that name in a message (nil: none).
type typed [limit.Limits]protoreflect.FieldDescriptor

func fieldsOf(m protoreflect.ProtoMessage, name func(limit.Limit) string) typed {
	var t typed
	fds := m.ProtoReflect().Descriptor().Fields()
	for _, l := range limit.All() {
		if n := name(l); n != "" {
			t[l] = fds.ByName(protoreflect.Name(n))
		}
	}
	return t
}

var (
	limitFields    = fieldsOf(&sluicev1.Limits{}, limit.Limit.String)
	overrideFields = fieldsOf(&sluicev1.LimitOverrides{}, limit.Limit.String)
	// rateFields: QuotaRates' typed fields are the dimension's name +
	// "_per_sec"; indexed by the dimension's Rate limit.
	rateFields = fieldsOf(&sluicev1.QuotaRates{}, func(l limit.Limit) string {
		if d := l.Def(); d.Kind == limit.Rate {
			return d.Dimension.String() + "_per_sec"
		}
		return ""
	})
)

func setInt(m protoreflect.Message, fd protoreflect.FieldDescriptor, v int64) {
	if fd.Kind() == protoreflect.Int32Kind {
		m.Set(fd, protoreflect.ValueOfInt32(int32(v)))
		return
	}
	m.Set(fd, protoreflect.ValueOfInt64(v))
}

// Limits returns v as the proto: every limit in values and in its typed
// field.
func Limits(v limit.Values) *sluicev1.Limits {
	p := &sluicev1.Limits{Values: make(map[string]int64, limit.Limits)}
	m := p.ProtoReflect()
	for _, l := range limit.All() {
		p.Values[l.String()] = v[l]
		if fd := limitFields[l]; fd != nil {
			setInt(m, fd, v[l])
		}
	}
	return p
}

// FromLimits reads p (nil: all zero).
func FromLimits(p *sluicev1.Limits) limit.Values {
	var v limit.Values
	if p == nil {
		return v
	}
	m := p.ProtoReflect()
	for _, l := range limit.All() {
		if x, ok := p.GetValues()[l.String()]; ok {
			v[l] = x
		} else if fd := limitFields[l]; fd != nil {
			v[l] = m.Get(fd).Int()
		}
	}
	return v
}

// Overrides returns o as the proto: each override in values and in its
// typed field.
func Overrides(o limit.Overrides) *sluicev1.LimitOverrides {
	p := &sluicev1.LimitOverrides{Values: make(map[string]int64, len(o))}
	m := p.ProtoReflect()
	for l, x := range o {
		if !l.Valid() {
			continue
		}
		p.Values[l.String()] = x
		if fd := overrideFields[l]; fd != nil {
			setInt(m, fd, x)
		}
	}
	return p
}

// FromOverrides reads p (nil: none). A name in values that is not a limit,
// or a limit set in both its typed field and values with different
// values, is an error naming it; the values themselves are not checked
// (limit.Overrides.Validate).
func FromOverrides(p *sluicev1.LimitOverrides) (limit.Overrides, error) {
	o := limit.Overrides{}
	if p == nil {
		return o, nil
	}
	for _, name := range slices.Sorted(maps.Keys(p.GetValues())) {
		l, ok := limit.ByName(name)
		if !ok {
			return nil, fmt.Errorf("values[%q]: not a limit", name)
		}
		o[l] = p.GetValues()[name]
	}
	m := p.ProtoReflect()
	for _, l := range limit.All() {
		fd := overrideFields[l]
		if fd == nil || !m.Has(fd) {
			continue
		}
		x := m.Get(fd).Int()
		if prev, ok := o[l]; ok && prev != x {
			return nil, fmt.Errorf("%s: %d here and %d in values", l, x, prev)
		}
		o[l] = x
	}
	return o, nil
}

// Rates returns per-second rates by dimension as the proto: in values by
// the dimension's name and in its typed field.
func Rates(r [limit.Dimensions]float64) *sluicev1.QuotaRates {
	p := &sluicev1.QuotaRates{Values: make(map[string]float64, limit.Dimensions)}
	m := p.ProtoReflect()
	for d := range limit.Dimensions {
		p.Values[d.String()] = r[d]
		if fd := rateFields[d.Limit()]; fd != nil {
			m.Set(fd, protoreflect.ValueOfFloat64(r[d]))
		}
	}
	return p
}

// FromRates reads p (nil: all zero); dimensions it does not know are
// ignored (a newer broker's).
func FromRates(p *sluicev1.QuotaRates) [limit.Dimensions]float64 {
	var r [limit.Dimensions]float64
	if p == nil {
		return r
	}
	m := p.ProtoReflect()
	for d := range limit.Dimensions {
		if x, ok := p.GetValues()[d.String()]; ok {
			r[d] = x
		} else if fd := rateFields[d.Limit()]; fd != nil {
			r[d] = m.Get(fd).Float()
		}
	}
	return r
}

// RateNames returns the names FromRates reads in p, for validation: each
// dimension's name and typed field (as "values[name]" or the field's
// name), in dimension order, with the value read.
func RateNames(p *sluicev1.QuotaRates) []Named {
	out := make([]Named, 0, limit.Dimensions)
	m := p.ProtoReflect()
	for d := range limit.Dimensions {
		if x, ok := p.GetValues()[d.String()]; ok {
			out = append(out, Named{fmt.Sprintf("values[%q]", d.String()), x})
		} else if fd := rateFields[d.Limit()]; fd != nil {
			out = append(out, Named{string(fd.Name()), m.Get(fd).Float()})
		}
	}
	return out
}

// Named is a value read with the name of where it was read.
type Named struct {
	Name  string
	Value float64
}

// SetOverride sets l's override in p: in its typed field where the
// message has one (a control plane from before the values map reads it),
// in values otherwise, and in values too when values names l already, so
// that the two agree. Other overrides, those of limits this version does
// not know included, stay as they are.
func SetOverride(p *sluicev1.LimitOverrides, l limit.Limit, v int64) {
	fd := overrideFields[l]
	if fd != nil {
		setInt(p.ProtoReflect(), fd, v)
	}
	if _, named := p.GetValues()[l.String()]; fd == nil || named {
		if p.Values == nil {
			p.Values = map[string]int64{}
		}
		p.Values[l.String()] = v
	}
}

// ClearOverride drops l's override from p, typed field and values.
func ClearOverride(p *sluicev1.LimitOverrides, l limit.Limit) {
	if fd := overrideFields[l]; fd != nil {
		p.ProtoReflect().Clear(fd)
	}
	delete(p.Values, l.String())
}

// usageFields are the typed fields of sluice.v1.Usage from before its
// values map, by the limit each is measured against. Fixed: a newer limit's
// usage is in values only.
var usageFields = map[limit.Limit]protoreflect.Name{
	limit.MaxTopics:            "topics",
	limit.MaxPartitions:        "partitions",
	limit.MaxTotalStorageBytes: "storage_bytes",
	limit.MaxGroups:            "groups",
	limit.MaxTransactionalIDs:  "transactional_ids",
	limit.ProduceBytesPerSec:   "produce_bytes_per_sec",
	limit.FetchBytesPerSec:     "fetch_bytes_per_sec",
	limit.RequestsPerSec:       "requests_per_sec",
	limit.ProducerIDsPerHour:   "producer_ids_per_hour",
}

// FromUsage reads what p says a tenant uses against each limit, in the
// limit's unit: values, and the typed fields for what values lacks (a
// control plane from before the map). A limit without a usage is absent.
func FromUsage(p *sluicev1.Usage) map[limit.Limit]float64 {
	out := map[limit.Limit]float64{}
	if p == nil {
		return out
	}
	m := p.ProtoReflect()
	fds := m.Descriptor().Fields()
	for _, l := range limit.All() {
		if x, ok := p.GetValues()[l.String()]; ok {
			out[l] = x
			continue
		}
		name, ok := usageFields[l]
		if !ok {
			continue
		}
		fd := fds.ByName(name)
		switch fd.Kind() {
		case protoreflect.DoubleKind:
			out[l] = m.Get(fd).Float()
		default:
			out[l] = float64(m.Get(fd).Int())
		}
	}
	return out
}
