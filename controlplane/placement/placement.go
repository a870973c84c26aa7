package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Broker is a live broker that may host replicas.
type Broker struct {
	ID   int32
	Rack string // "" when unknown
}

// Load is the number of replicas and of leaders each broker already holds
// (from existing topics); it may be nil. Entries for brokers not passed to
// Assign are ignored.
type Load map[int32]BrokerLoad

// BrokerLoad is what one broker already holds.
type BrokerLoad struct{ Replicas, Leaders int }

var (
	// ErrInvalid is returned, wrapped with detail, for a malformed request:
	// n or rf below 1, a duplicate broker id or a negative load.
	ErrInvalid = errors.New("invalid placement request")
	// ErrNotEnoughBrokers is returned, wrapped with detail, when rf exceeds
	// the number of live brokers.
	ErrNotEnoughBrokers = errors.New("not enough live brokers")
)

// Assign returns, for each of n partitions, its replica list; element 0 is
// the preferred leader. The package comment states the guarantees. The
// result is deterministic and does not depend on the order of brokers.
func Assign(brokers []Broker, load Load, n int, rf int) ([][]int32, error) {
	if n < 1 {
		return nil, fmt.Errorf("partition count %d, want at least 1: %w", n, ErrInvalid)
	}
	if rf < 1 {
		return nil, fmt.Errorf("replication factor %d, want at least 1: %w", rf, ErrInvalid)
	}
	cands, racks, err := candidates(brokers, load)
	if err != nil {
		return nil, err
	}
	if rf > len(cands) {
		return nil, fmt.Errorf("replication factor %d needs %d live brokers, %d live: %w",
			rf, rf, len(cands), ErrNotEnoughBrokers)
	}
	extra := shares(racks, rf)

	flat := make([]int32, n*rf) // one allocation for all replica lists
	out := make([][]int32, n)
	used := make([]bool, len(cands)) // brokers in the current partition
	for p := range out {
		clear(used)
		for r := range racks {
			racks[r].held = 0
		}
		above := 0 // racks holding more than their min of this partition
		replicas := flat[p*rf : p*rf : (p+1)*rf]
		for slot := range rf {
			best := -1
			for i := range cands {
				r := &racks[cands[i].rack]
				open := r.held < r.min || (r.held < r.max && above < extra)
				if !used[i] && open && (best < 0 || better(&cands[i], &cands[best], slot == 0, racks)) {
					best = i
				}
			}
			c, r := &cands[best], &racks[cands[best].rack]
			used[best] = true
			if r.held++; r.held > r.min {
				above++
			}
			r.load++
			c.replicas++
			if slot == 0 {
				c.leaders++
				c.topicLeaders++
			}
			replicas = append(replicas, c.id)
		}
		out[p] = replicas
	}
	return out, nil
}

// candidate is a broker with its running counts.
type candidate struct {
	id       int32
	rack     int // index into racks
	nth      int // rank by id within its rack, for the interleaved order
	replicas int
	leaders  int
	// topicLeaders counts the leaders of the partitions placed by this
	// call (the topic's new partitions).
	topicLeaders int
}

// rack is a failure domain with its running counts and its share of every
// partition.
type rack struct {
	brokers int
	load    int // replicas on its brokers, from Load and this topic so far
	min     int // replicas of each partition the rack must hold
	max     int // replicas of each partition the rack may hold: min or min+1
	held    int // replicas of the current partition
}

// better reports whether a beats b for the next replica of a partition; a
// full tie keeps b, which comes first in the interleaved order.
func better(a, b *candidate, leader bool, racks []rack) bool {
	if leader && a.topicLeaders != b.topicLeaders {
		return a.topicLeaders < b.topicLeaders
	}
	if leader && a.leaders != b.leaders {
		return a.leaders < b.leaders
	}
	if a.replicas != b.replicas {
		return a.replicas < b.replicas
	}
	if leader {
		return false
	}
	// Compare load per broker without dividing.
	ra, rb := &racks[a.rack], &racks[b.rack]
	if x, y := ra.load*rb.brokers, rb.load*ra.brokers; x != y {
		return x < y
	}
	return a.leaders > b.leaders
}

// shares sets every rack's min and max replicas of one partition by filling
// racks level by level, and returns how many racks hold max = min+1. Any
// pick that respects them spreads a partition over min(rf, len(racks)) racks
// and keeps two racks within one replica unless the smaller one is full.
func shares(racks []rack, rf int) (extra int) {
	level, filled := 0, 0 // largest level with sum(min(brokers, level)) <= rf
	for {
		next := 0
		for _, r := range racks {
			next += min(r.brokers, level+1)
		}
		if next > rf || next == filled {
			break
		}
		level, filled = level+1, next
	}
	for i := range racks {
		racks[i].min = min(racks[i].brokers, level)
		racks[i].max = min(racks[i].brokers, level+1)
	}
	return rf - filled
}

// candidates validates brokers and load, and returns the brokers in the
// interleaved tie-break order with their starting counts, and their racks.
func candidates(brokers []Broker, load Load) ([]candidate, []rack, error) {
	sorted := slices.Clone(brokers)
	slices.SortFunc(sorted, func(a, b Broker) int { return cmp.Compare(a.ID, b.ID) })
	cands := make([]candidate, len(sorted))
	var racks []rack
	index := make(map[string]int) // rack name to index into racks
	for i, b := range sorted {
		if i > 0 && sorted[i-1].ID == b.ID {
			return nil, nil, fmt.Errorf("duplicate broker id %d: %w", b.ID, ErrInvalid)
		}
		l := load[b.ID]
		if l.Replicas < 0 || l.Leaders < 0 {
			return nil, nil, fmt.Errorf("negative load %+v on broker %d: %w", l, b.ID, ErrInvalid)
		}
		r, ok := index[b.Rack]
		if !ok || b.Rack == "" {
			r = len(racks)
			racks = append(racks, rack{})
			index[b.Rack] = r
		}
		cands[i] = candidate{id: b.ID, rack: r, nth: racks[r].brokers, replicas: l.Replicas, leaders: l.Leaders}
		racks[r].brokers++
		racks[r].load += l.Replicas
	}
	// Racks are numbered by their lowest id.
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.nth, b.nth), cmp.Compare(a.rack, b.rack))
	})
	return cands, racks, nil
}
