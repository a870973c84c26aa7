package group

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func memberIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%02d", i)
	}
	return ids
}

// homogeneousSpec subscribes every id to topics.
func homogeneousSpec(ids []string, topics map[string]int32) assignSpec {
	var subs []string
	for t := range topics {
		subs = append(subs, t)
	}
	slices.Sort(subs)
	spec := assignSpec{topics: topics, hints: map[tp]hint{}}
	for _, id := range ids {
		spec.members = append(spec.members, assignMember{id: id, subs: subs})
	}
	return spec
}

// withHeld returns spec with every partition of a hinted strongly to its
// member.
func withHeld(spec assignSpec, a assignment) assignSpec {
	spec.hints = map[tp]hint{}
	for id, s := range a {
		for p := range s {
			spec.hints[p] = hint{strong: id}
		}
	}
	return spec
}

// holderOf maps every partition of a to its member.
func holderOf(a assignment) map[tp]string {
	out := map[tp]string{}
	for id, s := range a {
		for p := range s {
			out[p] = id
		}
	}
	return out
}

// checkValid checks that a assigns every partition of a subscribed topic to
// exactly one member subscribed to it, and nothing else.
func checkValid(t *testing.T, spec assignSpec, a assignment) {
	t.Helper()
	require.Len(t, a, len(spec.members))
	seen := map[tp]string{}
	for _, m := range spec.members {
		for p := range a[m.id] {
			require.Contains(t, m.subs, p.topic, "%s got %v outside its subscription", m.id, p)
			require.Less(t, p.partition, spec.topics[p.topic], "%v does not exist", p)
			require.GreaterOrEqual(t, p.partition, int32(0))
			other, dup := seen[p]
			require.False(t, dup, "%v assigned to %s and %s", p, other, m.id)
			seen[p] = m.id
		}
	}
	for _, t0 := range spec.subscribedTopics() {
		for p := range spec.topics[t0] {
			require.Contains(t, seen, tp{t0, p}, "%s:%d unassigned", t0, p)
		}
	}
}

// checkLocallyBalanced checks that no partition could move to a member
// subscribed to its topic that holds at least two fewer partitions than its
// holder.
func checkLocallyBalanced(t *testing.T, spec assignSpec, a assignment) {
	t.Helper()
	for _, x := range spec.members {
		for _, y := range spec.members {
			if len(a[y.id])+2 > len(a[x.id]) {
				continue
			}
			for p := range a[x.id] {
				require.NotContains(t, y.subs, p.topic,
					"%s holds %d partitions, %s holds %d and subscribes to %s", x.id, len(a[x.id]), y.id, len(a[y.id]), p.topic)
			}
		}
	}
}

func sizeSpread(a assignment) (lo, hi int) {
	lo = -1
	for _, s := range a {
		if lo < 0 || len(s) < lo {
			lo = len(s)
		}
		hi = max(hi, len(s))
	}
	return lo, hi
}

// minimumMoves is the fewest partitions that must change member when n
// members with identical subscriptions must be balanced and member i keeps
// kept[i] of its partitions to start with.
func minimumMoves(kept []int, total int) int {
	n := len(kept)
	q, r := total/n, total%n
	base, above := 0, 0
	for _, c := range kept {
		if c > q {
			base += c - q
			above++
		}
	}
	return base - min(r, above)
}

// TestAssignUniformProperties runs the uniform assignor on random shapes
// (seeded) with random previous holders: the result is valid and
// deterministic; with identical subscriptions, member sizes differ by at
// most one and exactly the minimum number of previously held partitions
// move; with different subscriptions, no balancing move is left.
func TestAssignUniformProperties(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(848, 1))
	for iter := range 2000 {
		nTopics := 1 + rng.IntN(5)
		topics := map[string]int32{}
		var names []string
		for i := range nTopics {
			name := fmt.Sprintf("t%d", i)
			names = append(names, name)
			topics[name] = int32(rng.IntN(25))
		}
		ids := memberIDs(1 + rng.IntN(15))
		homogeneous := rng.IntN(2) == 0
		spec := homogeneousSpec(ids, topics)
		if !homogeneous {
			for i := range spec.members {
				var subs []string
				for _, n := range names {
					if rng.IntN(2) == 0 {
						subs = append(subs, n)
					}
				}
				if subs == nil {
					subs = []string{names[rng.IntN(len(names))]}
				}
				spec.members[i].subs = subs
			}
		}
		// Random previous holders, including members that are gone.
		holders := append(slices.Clone(ids), "gone1", "gone2")
		for _, n := range names {
			for p := range topics[n] + 3 {
				switch rng.IntN(4) {
				case 0:
					spec.hints[tp{n, p}] = hint{strong: holders[rng.IntN(len(holders))]}
				case 1:
					spec.hints[tp{n, p}] = hint{weak: holders[rng.IntN(len(holders))]}
				case 2:
					spec.hints[tp{n, p}] = hint{strong: holders[rng.IntN(len(holders))], weak: holders[rng.IntN(len(holders))]}
				}
			}
		}
		name := fmt.Sprintf("iter %d (%d members, topics %v, homogeneous %v)", iter, len(ids), topics, homogeneous)
		a := assignUniform(spec)
		checkValid(t, spec, a)
		require.Equal(t, a, assignUniform(spec), name)
		checkLocallyBalanced(t, spec, a)
		if !homogeneous {
			continue
		}
		lo, hi := sizeSpread(a)
		require.LessOrEqual(t, hi-lo, 1, name)
		// Count what each member keeps before balancing (the partitions
		// its effective hint gives it) and what actually moved.
		index := map[string]int{}
		for i, id := range ids {
			index[id] = i
		}
		kept := make([]int, len(ids))
		total, moved := 0, 0
		holder := holderOf(a)
		for _, n := range names {
			for p := range topics[n] {
				total++
				h := spec.hints[tp{n, p}]
				prev := h.strong
				if _, ok := index[prev]; !ok {
					prev = h.weak
				}
				if _, ok := index[prev]; !ok {
					continue
				}
				kept[index[prev]]++
				if holder[tp{n, p}] != prev {
					moved++
				}
			}
		}
		require.Equal(t, minimumMoves(kept, total), moved, name)
	}
}

// TestAssignUniformShedsWeakFirst: a member above its quota gives up the
// partitions it only had in the previous target before those it holds.
func TestAssignUniformShedsWeakFirst(t *testing.T) {
	t.Parallel()
	spec := homogeneousSpec(memberIDs(2), map[string]int32{"t": 4})
	spec.hints = map[tp]hint{
		{"t", 0}: {weak: "m00"}, {"t", 1}: {strong: "m00"},
		{"t", 2}: {weak: "m00"}, {"t", 3}: {strong: "m00"},
	}
	a := assignUniform(spec)
	require.Equal(t, partSet{{"t", 1}: {}, {"t", 3}: {}}, a["m00"])
	require.Equal(t, partSet{{"t", 0}: {}, {"t", 2}: {}}, a["m01"])
}

func TestAssignUniformFromScratch(t *testing.T) {
	t.Parallel()
	spec := homogeneousSpec(memberIDs(3), map[string]int32{"a": 4, "b": 3})
	a := assignUniform(spec)
	// Dealt round-robin in topic and partition order.
	require.Equal(t, assignment{
		"m00": {{"a", 0}: {}, {"a", 3}: {}, {"b", 2}: {}},
		"m01": {{"a", 1}: {}, {"b", 0}: {}},
		"m02": {{"a", 2}: {}, {"b", 1}: {}},
	}, a)
}

// TestAssignUniformStickyAddMember: a 21st member joining 20 members that
// hold 60 partitions takes at most ceil(60/21) = 3 partitions, all from
// others, and nobody else gains or loses anything else.
func TestAssignUniformStickyAddMember(t *testing.T) {
	t.Parallel()
	for _, topics := range []map[string]int32{
		{"t": 60},
		{"a": 20, "b": 20, "c": 20},
		{"a": 7, "b": 53},
	} {
		ids := memberIDs(21)
		before := assignUniform(homogeneousSpec(ids[:20], topics))
		lo, hi := sizeSpread(before)
		require.Equal(t, [2]int{3, 3}, [2]int{lo, hi})
		spec := withHeld(homogeneousSpec(ids, topics), before)
		after := assignUniform(spec)
		checkValid(t, spec, after)
		lo, hi = sizeSpread(after)
		require.LessOrEqual(t, hi-lo, 1)
		prev := holderOf(before)
		moved := 0
		for p, id := range holderOf(after) {
			if prev[p] != id {
				moved++
				require.Equal(t, "m20", id, "%v moved from %s to %s", p, prev[p], id)
			}
		}
		require.LessOrEqual(t, moved, 3)
		require.Len(t, after["m20"], moved)
	}
}

// TestAssignUniformStickyRemoveMember: when a member leaves, only its
// partitions move.
func TestAssignUniformStickyRemoveMember(t *testing.T) {
	t.Parallel()
	for _, topics := range []map[string]int32{{"t": 60}, {"a": 20, "b": 20, "c": 20}, {"t": 61}} {
		ids := memberIDs(20)
		before := assignUniform(homogeneousSpec(ids, topics))
		for _, gone := range []int{0, 7, 19} {
			rest := slices.Delete(slices.Clone(ids), gone, gone+1)
			spec := withHeld(homogeneousSpec(rest, topics), before)
			after := assignUniform(spec)
			checkValid(t, spec, after)
			lo, hi := sizeSpread(after)
			require.LessOrEqual(t, hi-lo, 1)
			prev := holderOf(before)
			for p, id := range holderOf(after) {
				if prev[p] != id {
					require.Equal(t, ids[gone], prev[p], "%v moved from %s to %s", p, prev[p], id)
				}
			}
		}
	}
}

// TestAssignUniformDifferentSubscriptions: each topic goes only to its
// subscribers, and members sharing a topic balance it.
func TestAssignUniformDifferentSubscriptions(t *testing.T) {
	t.Parallel()
	spec := assignSpec{
		topics: map[string]int32{"a": 6, "b": 2, "c": 3, "gone": 0},
		members: []assignMember{
			{id: "m0", subs: []string{"a"}},
			{id: "m1", subs: []string{"a", "b"}},
			{id: "m2", subs: []string{"b", "gone"}},
			{id: "m3", subs: []string{"c"}},
			{id: "m4", subs: []string{"missing"}},
		},
	}
	a := assignUniform(spec)
	checkValid(t, spec, a)
	checkLocallyBalanced(t, spec, a)
	// c (one subscriber) is placed first, then a splits 3/3 between m0 and
	// m1, then both b partitions go to m2, which holds fewer than m1.
	require.Len(t, a["m0"], 3)
	require.Len(t, a["m1"], 3)
	require.Equal(t, partSet{{"b", 0}: {}, {"b", 1}: {}}, a["m2"])
	require.Len(t, a["m3"], 3)
	require.Empty(t, a["m4"])

	// A topic only one member subscribes to stays with it however big.
	spec = assignSpec{
		topics: map[string]int32{"small": 1, "big": 10},
		members: []assignMember{
			{id: "m0", subs: []string{"big", "small"}},
			{id: "m1", subs: []string{"small"}},
		},
	}
	a = assignUniform(spec)
	require.Len(t, a["m0"], 10)
	require.Equal(t, partSet{{"small", 0}: {}}, a["m1"])

	// Sticky across a subscription change: m1 also subscribes to big and
	// takes only big partitions from m0, keeping small:0.
	spec.members[1].subs = []string{"big", "small"}
	spec = withHeld(spec, a)
	b := assignUniform(spec)
	checkValid(t, spec, b)
	require.Contains(t, b["m1"], tp{"small", 0})
	require.Len(t, b["m0"], 6)
	require.Len(t, b["m1"], 5)
	for p := range b["m0"] {
		require.Contains(t, a["m0"], p)
	}
}

// TestAssignRangeMatchesKafka compares with the ranges of Kafka's
// RangeAssignor.
func TestAssignRangeMatchesKafka(t *testing.T) {
	t.Parallel()
	type member struct{ id, instance, subs string }
	tests := []struct {
		name    string
		topics  map[string]int32
		members []member
		want    map[string]string // member → TopicPartitions.String()
	}{
		{name: "one member", topics: map[string]int32{"t": 3},
			members: []member{{id: "a", subs: "t"}},
			want:    map[string]string{"a": "t:0,1,2"}},
		{name: "kafka javadoc: two members, two topics of 3", topics: map[string]int32{"t0": 3, "t1": 3},
			members: []member{{id: "c0", subs: "t0,t1"}, {id: "c1", subs: "t0,t1"}},
			want:    map[string]string{"c0": "t0:0,1 t1:0,1", "c1": "t0:2 t1:2"}},
		{name: "7 over 3", topics: map[string]int32{"t": 7},
			members: []member{{id: "c", subs: "t"}, {id: "a", subs: "t"}, {id: "b", subs: "t"}},
			want:    map[string]string{"a": "t:0,1,2", "b": "t:3,4", "c": "t:5,6"}},
		{name: "more members than partitions", topics: map[string]int32{"t": 2},
			members: []member{{id: "a", subs: "t"}, {id: "b", subs: "t"}, {id: "c", subs: "t"}, {id: "d", subs: "t"}},
			want:    map[string]string{"a": "t:0", "b": "t:1", "c": "-", "d": "-"}},
		{name: "per topic subscribers", topics: map[string]int32{"x": 4, "y": 3},
			members: []member{{id: "a", subs: "x"}, {id: "b", subs: "x,y"}, {id: "c", subs: "y"}},
			want:    map[string]string{"a": "x:0,1", "b": "x:2,3 y:0,1", "c": "y:2"}},
		{name: "static members first by instance id", topics: map[string]int32{"t": 5},
			members: []member{{id: "a", subs: "t"}, {id: "b", instance: "i2", subs: "t"}, {id: "c", instance: "i1", subs: "t"}},
			want:    map[string]string{"c": "t:0,1", "b": "t:2,3", "a": "t:4"}},
		{name: "missing topic", topics: map[string]int32{"t": 2},
			members: []member{{id: "a", subs: "t,nope"}, {id: "b", subs: "nope"}},
			want:    map[string]string{"a": "t:0,1", "b": "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := assignSpec{topics: tt.topics}
			for _, m := range tt.members {
				subs := normalize(splitComma(m.subs))
				spec.members = append(spec.members, assignMember{id: m.id, instanceID: m.instance, subs: subs})
			}
			slices.SortFunc(spec.members, func(a, b assignMember) int {
				return compareRangeMembers(assignMember{id: a.id}, assignMember{id: b.id})
			})
			a := assignRange(spec)
			checkValid(t, spec, a)
			got := map[string]string{}
			for id, s := range a {
				got[id] = topicPartitions(s, nil).String()
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
