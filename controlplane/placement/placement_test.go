package placement_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/placement"
)

// brokers returns brokers 1..len(racks), broker i+1 on racks[i].
func brokers(racks ...string) []placement.Broker {
	bs := make([]placement.Broker, len(racks))
	for i, r := range racks {
		bs[i] = placement.Broker{ID: int32(i + 1), Rack: r}
	}
	return bs
}

func TestPlacementAssign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		brokers []placement.Broker
		load    placement.Load
		n, rf   int
		want    [][]int32
	}{
		{
			name:    "single broker",
			brokers: brokers(""),
			n:       2, rf: 1,
			want: [][]int32{{1}, {1}},
		},
		{
			name:    "no racks, leaders and followers rotate",
			brokers: brokers("", "", ""),
			n:       3, rf: 2,
			want: [][]int32{{1, 2}, {3, 1}, {2, 3}},
		},
		{
			name:    "rf equals broker count",
			brokers: brokers("", "", ""),
			n:       3, rf: 3,
			want: [][]int32{{1, 2, 3}, {2, 1, 3}, {3, 1, 2}},
		},
		{
			name:    "two racks, one replica on each",
			brokers: brokers("a", "a", "b", "b"),
			n:       4, rf: 2,
			want: [][]int32{{1, 3}, {2, 4}, {3, 1}, {4, 2}},
		},
		{
			// Racks are interleaved (1 3 5 2 4 6), so ids grouped by rack
			// do not make the first partitions pile onto one rack.
			name:    "three racks, ids grouped by rack",
			brokers: brokers("a", "a", "b", "b", "c", "c"),
			n:       2, rf: 3,
			want: [][]int32{{1, 3, 5}, {2, 4, 6}},
		},
		{
			name:    "more replicas than racks, one rack doubles up",
			brokers: brokers("a", "a", "b", "b"),
			n:       2, rf: 3,
			want: [][]int32{{1, 3, 2}, {4, 1, 3}},
		},
		{
			// Rack b has one broker, so rack a must hold two of every three.
			name:    "uneven racks",
			brokers: brokers("a", "a", "a", "b"),
			n:       2, rf: 3,
			want: [][]int32{{1, 4, 2}, {3, 1, 4}},
		},
		{
			// Broker 3 has no rack: it is a rack of its own, so with rf 2
			// every partition has one replica on rack a and one on broker 3.
			name:    "unknown rack is its own rack",
			brokers: brokers("a", "a", ""),
			n:       3, rf: 2,
			want: [][]int32{{1, 3}, {2, 3}, {3, 1}},
		},
		{
			name:    "broker leading 10 partitions gets no new leader",
			brokers: brokers("", "", ""),
			load:    placement.Load{1: {Replicas: 10, Leaders: 10}},
			n:       2, rf: 1,
			want: [][]int32{{2}, {3}},
		},
		{
			name:    "loaded broker is the last follower",
			brokers: brokers("", "", ""),
			load:    placement.Load{1: {Replicas: 10, Leaders: 10}},
			n:       2, rf: 3,
			want: [][]int32{{2, 3, 1}, {3, 2, 1}},
		},
		{
			name:    "a topic's leaders spread over every broker whatever the load",
			brokers: brokers("", "", ""),
			load:    placement.Load{1: {Replicas: 13, Leaders: 13}, 2: {Replicas: 13, Leaders: 12}, 3: {Replicas: 13, Leaders: 14}},
			n:       3, rf: 3,
			want: [][]int32{{2, 3, 1}, {1, 3, 2}, {3, 1, 2}},
		},
		{
			name:    "load on an unknown broker is ignored",
			brokers: brokers("", ""),
			load:    placement.Load{9: {Replicas: 5, Leaders: 5}},
			n:       2, rf: 1,
			want: [][]int32{{1}, {2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := placement.Assign(tt.brokers, tt.load, tt.n, tt.rf)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestPlacementAssignErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		brokers []placement.Broker
		load    placement.Load
		n, rf   int
		want    error
		msg     string
	}{
		{name: "no partitions", brokers: brokers(""), n: 0, rf: 1, want: placement.ErrInvalid},
		{name: "negative partitions", brokers: brokers(""), n: -1, rf: 1, want: placement.ErrInvalid},
		{name: "zero rf", brokers: brokers(""), n: 1, rf: 0, want: placement.ErrInvalid},
		{
			name:    "duplicate broker id",
			brokers: []placement.Broker{{ID: 2}, {ID: 1}, {ID: 2, Rack: "a"}},
			n:       1, rf: 1,
			want: placement.ErrInvalid,
			msg:  "duplicate broker id 2: invalid placement request",
		},
		{
			name:    "negative load",
			brokers: brokers(""),
			load:    placement.Load{1: {Replicas: -1}},
			n:       1, rf: 1,
			want: placement.ErrInvalid,
		},
		{
			name:    "rf above live brokers",
			brokers: brokers("a", "b"),
			n:       1, rf: 3,
			want: placement.ErrNotEnoughBrokers,
			msg:  "replication factor 3 needs 3 live brokers, 2 live: not enough live brokers",
		},
		{name: "no brokers", n: 1, rf: 1, want: placement.ErrNotEnoughBrokers},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := placement.Assign(tt.brokers, tt.load, tt.n, tt.rf)
			require.ErrorIs(t, err, tt.want)
			require.Nil(t, got)
			if tt.msg != "" {
				require.EqualError(t, err, tt.msg)
			}
		})
	}
}

// rackMode says how randomCase spreads brokers over racks.
type rackMode int

const (
	noRacks       rackMode = iota // every broker has Rack ""
	balancedRacks                 // every rack has the same number of brokers
	unevenRacks                   // racks of any size, some brokers without a rack
)

func (m rackMode) String() string {
	return [...]string{"no racks", "balanced racks", "uneven racks"}[m]
}

type randomCase struct {
	mode    rackMode
	brokers []placement.Broker
	n, rf   int
}

func (c randomCase) String() string {
	return fmt.Sprintf("%v n=%d rf=%d brokers=%v", c.mode, c.n, c.rf, c.brokers)
}

func newRandomCase(r *rand.Rand) randomCase {
	c := randomCase{mode: rackMode(r.IntN(3))}
	racks := 1 + r.IntN(8)
	perRack := 1 + r.IntN(6)
	c.brokers = make([]placement.Broker, racks*perRack)
	id := int32(r.IntN(3))
	for i := range c.brokers {
		id += 1 + int32(r.IntN(3)) // sparse ids
		c.brokers[i].ID = id
	}
	r.Shuffle(len(c.brokers), func(i, j int) { c.brokers[i], c.brokers[j] = c.brokers[j], c.brokers[i] })
	for i := range c.brokers {
		switch c.mode {
		case balancedRacks:
			c.brokers[i].Rack = fmt.Sprintf("r%d", i%racks)
		case unevenRacks:
			if k := r.IntN(racks + 1); k < racks {
				c.brokers[i].Rack = fmt.Sprintf("r%d", k)
			}
		}
	}
	c.rf = 1 + r.IntN(min(len(c.brokers), 5))
	if r.IntN(4) == 0 {
		c.rf = 1 + r.IntN(len(c.brokers))
	}
	c.n = 1 + r.IntN(150)
	return c
}

// domain is a failure domain: a named rack, or a broker without a rack.
type domain struct {
	rack   string
	broker int32 // set only when rack is ""
}

func domainOf(b placement.Broker) domain {
	if b.Rack == "" {
		return domain{broker: b.ID}
	}
	return domain{rack: b.Rack}
}

func TestPlacementAssignProperties(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 0x5111ce))
			for range 250 {
				c := newRandomCase(r)
				got, err := placement.Assign(c.brokers, nil, c.n, c.rf)
				require.NoError(t, err, c)
				checkPartitions(t, c, got)
				checkBalance(t, c, got)

				again, err := placement.Assign(c.brokers, nil, c.n, c.rf)
				require.NoError(t, err, c)
				require.Equal(t, got, again, "not deterministic: %v", c)

				shuffled := slices.Clone(c.brokers)
				r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				reordered, err := placement.Assign(shuffled, nil, c.n, c.rf)
				require.NoError(t, err, c)
				require.Equal(t, got, reordered, "depends on broker order: %v", c)
			}
		})
	}
}

// checkPartitions checks every partition on its own: rf distinct live
// brokers, spread over failure domains as evenly as their sizes allow.
func checkPartitions(t *testing.T, c randomCase, got [][]int32) {
	t.Helper()
	byID := make(map[int32]placement.Broker)
	size := make(map[domain]int)
	for _, b := range c.brokers {
		byID[b.ID] = b
		size[domainOf(b)]++
	}
	require.Len(t, got, c.n, c)
	for p, replicas := range got {
		if len(replicas) != c.rf {
			require.Failf(t, "wrong replica count", "partition %d: %v: %v", p, replicas, c)
		}
		held := make(map[domain]int)
		seen := make(map[int32]bool)
		for _, id := range replicas {
			b, ok := byID[id]
			if !ok || seen[id] {
				require.Failf(t, "unknown or repeated broker", "partition %d: broker %d in %v: %v", p, id, replicas, c)
			}
			seen[id] = true
			held[domainOf(b)]++
		}
		if len(size) >= c.rf && len(held) != c.rf {
			require.Failf(t, "racks not distinct", "partition %d: %v: %v", p, replicas, c)
		}
		// Two racks differ by at most one replica unless the smaller is full:
		// no rack holds two more than a rack with room.
		most, leastWithRoom := 0, c.rf
		for d, n := range size {
			most = max(most, held[d])
			if held[d] < n {
				leastWithRoom = min(leastWithRoom, held[d])
			}
		}
		if most > leastWithRoom+1 {
			require.Failf(t, "racks uneven", "partition %d: %v holds %v: %v", p, replicas, held, c)
		}
	}
}

// checkBalance checks counts over the topic after every partition: leaders
// within one of each other; replicas within one of each other when racks
// are balanced, and within each rack otherwise.
func checkBalance(t *testing.T, c randomCase, got [][]int32) {
	t.Helper()
	index := make(map[int32]int)       // broker id to position in c.brokers
	byRack := make(map[domain][]int)   // positions of a rack's brokers
	all := make([]int, len(c.brokers)) // all positions
	for i, b := range c.brokers {
		index[b.ID] = i
		byRack[domainOf(b)] = append(byRack[domainOf(b)], i)
		all[i] = i
	}
	leaders := make([]int, len(c.brokers))
	replicas := make([]int, len(c.brokers))
	for p, partition := range got {
		leaders[index[partition[0]]]++
		for _, id := range partition {
			replicas[index[id]]++
		}
		if spread(all, leaders) > 1 {
			require.Failf(t, "leaders uneven", "after partition %d: %v: %v", p, leaders, c)
		}
		if c.mode != unevenRacks && spread(all, replicas) > 1 {
			require.Failf(t, "replicas uneven", "after partition %d: %v: %v", p, replicas, c)
		}
		for d, members := range byRack {
			if spread(members, replicas) > 1 {
				require.Failf(t, "replicas uneven in a rack", "rack %v after partition %d: %v: %v", d, p, replicas, c)
			}
		}
	}
}

// spread is the largest count minus the smallest over the given positions.
func spread(positions []int, count []int) int {
	lo, hi := count[positions[0]], count[positions[0]]
	for _, i := range positions {
		lo, hi = min(lo, count[i]), max(hi, count[i])
	}
	return hi - lo
}

// TestPlacementAssignLoad creates topics one after another, each placed
// with the load of the ones before, as the control plane does.
func TestPlacementAssignLoad(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(42, 0x5111ce))
	for range 500 {
		c := newRandomCase(r)
		load := placement.Load{}
		for topic := range 4 {
			rf := 1 + r.IntN(min(len(c.brokers), 4))
			n := 1 + r.IntN(40)
			got, err := placement.Assign(c.brokers, load, n, rf)
			require.NoError(t, err, c)
			before := clonedLoad(load)
			for _, partition := range got {
				l := load[partition[0]]
				l.Leaders++
				load[partition[0]] = l
				for _, id := range partition {
					l := load[id]
					l.Replicas++
					load[id] = l
				}
			}
			// A broker gains a leader only while none leads fewer, so one
			// that gained any ends at most one above the least.
			least := load[c.brokers[0].ID].Leaders
			for _, b := range c.brokers {
				least = min(least, load[b.ID].Leaders)
			}
			for _, b := range c.brokers {
				if load[b.ID].Leaders > before[b.ID].Leaders {
					require.LessOrEqual(t, load[b.ID].Leaders, least+1,
						"topic %d: broker %d leads %d: %v", topic, b.ID, load[b.ID].Leaders, c)
				}
			}
			// The topic's own leaders differ by at most one, whatever the
			// load before it.
			topicLeaders := map[int32]int{}
			for _, partition := range got {
				topicLeaders[partition[0]]++
			}
			all := make([]int, len(c.brokers))
			mine := make([]int, len(c.brokers))
			for i, b := range c.brokers {
				all[i], mine[i] = i, topicLeaders[b.ID]
			}
			require.LessOrEqual(t, spread(all, mine), 1, "topic %d's own leaders: %v", topic, c)
			leaders := make([]int, len(c.brokers))
			replicas := make([]int, len(c.brokers))
			for i, b := range c.brokers {
				all[i], leaders[i], replicas[i] = i, load[b.ID].Leaders, load[b.ID].Replicas
			}
			require.LessOrEqual(t, spread(all, leaders), 1, "topic %d leaders: %v", topic, c)
			if c.mode != unevenRacks {
				// Topics with different rf can leave one extra replica
				// over what a single topic would.
				require.LessOrEqual(t, spread(all, replicas), 2, "topic %d replicas: %v", topic, c)
			}
		}
	}
}

func clonedLoad(l placement.Load) placement.Load {
	out := make(placement.Load, len(l))
	for id, bl := range l {
		out[id] = bl
	}
	return out
}

func BenchmarkPlacementAssign(b *testing.B) {
	bs := make([]placement.Broker, 100)
	for i := range bs {
		bs[i] = placement.Broker{ID: int32(i + 1), Rack: fmt.Sprintf("r%d", i%10)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := placement.Assign(bs, nil, 1000, 3); err != nil {
			b.Fatal(err)
		}
	}
}
