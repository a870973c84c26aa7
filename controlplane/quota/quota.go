package quota

import (
	"slices"
	"time"

	"github.com/sluicemq/sluice/limit"
)

// Interval is how often brokers exchange quotas.
const Interval = time.Second

// Defaults of Config.
const (
	DefaultFloor = 0.1
	DefaultFresh = 3 * Interval
)

// Config shapes the division.
type Config struct {
	// Floor (α, in [0, 1]) is the part of each limit spread evenly over
	// the brokers with a fresh report; the rest follows offered traffic.
	Floor float64
	// Fresh is how old a broker's report may be and still count.
	Fresh time.Duration
}

// DefaultConfig returns Floor 0.1 and Fresh 3 intervals.
func DefaultConfig() Config { return Config{Floor: DefaultFloor, Fresh: DefaultFresh} }

// Rates are per-second rates of one tenant, one per rate dimension of the
// limit table (limit.ProduceBytes, ...).
type Rates [limit.Dimensions]float64

// Add returns r + o.
func (r Rates) Add(o Rates) Rates {
	for d := range r {
		r[d] += o[d]
	}
	return r
}

// LimitRates returns a tenant's rate limits per second (a limit per hour,
// as producer_ids_per_hour, becomes per second).
func LimitRates(l limit.Values) Rates { return l.Rates() }

// Report is one broker's last quota report for one tenant.
type Report struct {
	BrokerID int32
	// At is when the control plane received it.
	At       time.Time
	Offered  Rates
	Admitted Rates
	// Holdings at the broker: bytes of the local logs it leads, groups and
	// transactional ids it coordinates.
	HotStorageBytes  int64
	Groups           int64
	TransactionalIDs int64
	// Arriving: the tenant's traffic starts at the broker, a call waits
	// for this report's allotment, and what it offers there is not
	// measured yet (see Arrive). Not stored: a stored arriving report
	// holds Arrive's estimate.
	Arriving bool
}

// Arrive returns r with the offered rates of an arriving report (the
// tenant's traffic starts at its broker, and a call there waits for the
// allotment) estimated from others, the tenant's fresh reports from the
// other brokers: in every dimension, the larger of r's own and the mean
// of others' (0 with no others), even in dimensions the tenant does not
// use at that broker, for the one interval until its next report. A
// report that is not arriving is returned as it is.
//
// Unmeasured is not nothing: taken as zero, an arriving broker would get
// the division's floor (α/N of the limit), and its first request would
// put its bucket seconds into debt, while the brokers the tenant used
// before keep shares that their moving averages give up over several
// time constants. A client spreading its records over partitions on
// every broker, as Kafka's partitioners do with one buffer for all of
// them, moves at the pace of its slowest partition, so it was held to
// about N × α/N of its limit at first, a fifth to a third of it for the
// first 10 to 15 s (measured with franz-go over 3 brokers). The mean
// assumes the new broker is an average one; the next report measures it.
// The caller stores the estimate as the report's offered, so every
// broker dividing the tenant's limits in the next second divides them
// the same way.
func Arrive(r Report, others []Report) Report {
	if !r.Arriving {
		return r
	}
	var mean Rates
	n := 0
	for _, o := range others {
		if o.BrokerID == r.BrokerID || o.Arriving {
			continue
		}
		mean = mean.Add(nonNeg(o.Offered))
		n++
	}
	for d := range r.Offered {
		if n > 0 {
			r.Offered[d] = max(r.Offered[d], mean[d]/float64(n))
		}
	}
	return r
}

// FreshReports returns the reports received within c.Fresh before now (At after
// now−Fresh), the latest one per broker, ordered by broker id.
func (c Config) FreshReports(reports []Report, now time.Time) []Report {
	cut := now.Add(-c.Fresh)
	latest := make(map[int32]Report, len(reports))
	for _, r := range reports {
		if !r.At.After(cut) {
			continue
		}
		if prev, ok := latest[r.BrokerID]; !ok || r.At.After(prev.At) {
			latest[r.BrokerID] = r
		}
	}
	out := make([]Report, 0, len(latest))
	for _, r := range latest {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Report) int { return int(a.BrokerID) - int(b.BrokerID) })
	return out
}

// Divide returns each reporting broker's allotment of lim (the doc's
// formula with α = c.Floor), keyed by broker id. reports are the tenant's
// fresh reports (FreshReports), one per broker; each dimension's allotments sum
// to that dimension's limit. No reports: no allotments.
func (c Config) Divide(lim Rates, reports []Report) map[int32]Rates {
	out := make(map[int32]Rates, len(reports))
	if len(reports) == 0 {
		return out
	}
	var total Rates
	for _, r := range reports {
		total = total.Add(nonNeg(r.Offered))
	}
	n := float64(len(reports))
	alpha := min(max(c.Floor, 0), 1)
	share := func(l, offered, total float64) float64 {
		if total <= 0 {
			return l / n
		}
		return l * (alpha/n + (1-alpha)*offered/total)
	}
	for _, r := range reports {
		o := nonNeg(r.Offered)
		var a Rates
		for d := range a {
			a[d] = share(lim[d], o[d], total[d])
		}
		out[r.BrokerID] = a
	}
	return out
}

// nonNeg clamps negative (malformed) rates to 0: a broker cannot take
// from the others' shares by reporting less than nothing.
func nonNeg(r Rates) Rates {
	for d := range r {
		r[d] = max(r[d], 0)
	}
	return r
}

// Holdings are what a tenant holds over the cluster.
type Holdings struct {
	HotStorageBytes  int64
	ColdStorageBytes int64
	Groups           int64
	TransactionalIDs int64
	// Admitted is the sum of the reports' admitted rates.
	Admitted Rates
}

// StorageBytes is hot plus cold.
func (h Holdings) StorageBytes() int64 { return h.HotStorageBytes + h.ColdStorageBytes }

// Sum adds up the holdings of reports (the tenant's fresh reports) and
// the cold bytes it holds in the object store.
func Sum(reports []Report, coldStorageBytes int64) Holdings {
	h := Holdings{ColdStorageBytes: coldStorageBytes}
	for _, r := range reports {
		h.HotStorageBytes += r.HotStorageBytes
		h.Groups += r.Groups
		h.TransactionalIDs += r.TransactionalIDs
		h.Admitted = h.Admitted.Add(r.Admitted)
	}
	return h
}

// Decision says which count limits the tenant has reached: brokers refuse
// what would add to them.
type Decision struct {
	StorageExceeded          bool
	GroupsExceeded           bool
	TransactionalIDsExceeded bool
}

// Decide compares h with l: a limit is reached when the holding is at
// least the limit (a limit of 0 allows nothing more).
func Decide(l limit.Values, h Holdings) Decision {
	return Decision{
		StorageExceeded:          h.StorageBytes() >= l[limit.MaxTotalStorageBytes],
		GroupsExceeded:           h.Groups >= l[limit.MaxGroups],
		TransactionalIDsExceeded: h.TransactionalIDs >= l[limit.MaxTransactionalIDs],
	}
}

// ReservationTTL is how long a reservation of a new group or transactional
// id (ReserveObjects) counts against its tenant's limit while its broker
// has not confirmed it: longer than a coordinator takes to create the
// object (its write to the internal topic times out after 30 s) and report
// it (an exchange interval), so a reservation expires unconfirmed only
// when its broker stopped (crashed, or cut off from the control plane).
const ReservationTTL = 2 * time.Minute
