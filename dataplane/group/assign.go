package group

import (
	"cmp"
	"slices"
	"strings"
)

// The server-side assignors a group can use (Config.Assignor).
const (
	// AssignorUniform spreads the partitions of every subscribed topic
	// evenly over the members subscribed to it, keeping every partition
	// where it is unless balance requires moving it, and then moving as few
	// as possible. When all members subscribe to the same topics, member
	// partition counts differ by at most one; otherwise no partition can be
	// moved to a member subscribed to its topic that holds at least two
	// fewer partitions than its holder. The default, like Kafka's "uniform".
	AssignorUniform = "uniform"
	// AssignorRange gives every member subscribed to a topic a contiguous
	// range of its partitions, like Kafka's client-side RangeAssignor:
	// members in order (static members first, by instance id, then the
	// others by member id), each getting partitions/members partitions and
	// the first partitions%members one more. It is not sticky.
	AssignorRange = "range"
)

// assignMember is a member as the assignors see it.
type assignMember struct {
	id         string
	instanceID string
	subs       []string // sorted, unique
}

// hint names the members a partition should preferably stay with: strong
// is the member that holds it now (or claims it when nobody holds it), weak
// the member of the previous target assignment. Only the uniform assignor
// uses hints.
type hint struct {
	strong, weak string
}

// assignSpec is the input of an assignor.
type assignSpec struct {
	members []assignMember // sorted by id
	topics  map[string]int32
	hints   map[tp]hint
}

// assignment is a target assignment: member id → partitions. Every member
// of the spec has an entry, possibly empty.
type assignment map[string]partSet

func knownAssignor(name string) bool {
	return name == AssignorUniform || name == AssignorRange
}

// assign runs the named assignor, which must be known.
func assign(name string, spec assignSpec) assignment {
	if name == AssignorRange {
		return assignRange(spec)
	}
	return assignUniform(spec)
}

// subscribedTopics returns the topics with partitions that a member of spec
// subscribes to, ascending.
func (spec assignSpec) subscribedTopics() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range spec.members {
		for _, t := range m.subs {
			if !seen[t] && spec.topics[t] > 0 {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	slices.Sort(out)
	return out
}

func assignRange(spec assignSpec) assignment {
	out := make(assignment, len(spec.members))
	for _, m := range spec.members {
		out[m.id] = partSet{}
	}
	for _, t := range spec.subscribedTopics() {
		var subs []assignMember
		for _, m := range spec.members {
			if slices.Contains(m.subs, t) {
				subs = append(subs, m)
			}
		}
		slices.SortFunc(subs, compareRangeMembers)
		n := int32(len(subs))
		count := spec.topics[t]
		per, extra := count/n, count%n
		for i, m := range subs {
			i := int32(i)
			start := i*per + min(i, extra)
			length := per
			if i < extra {
				length++
			}
			for p := start; p < start+length; p++ {
				out[m.id][tp{t, p}] = struct{}{}
			}
		}
	}
	return out
}

// compareRangeMembers orders members as Kafka's AbstractPartitionAssignor
// does: static members first, by instance id, then dynamic ones by member
// id.
func compareRangeMembers(a, b assignMember) int {
	switch {
	case a.instanceID != "" && b.instanceID != "":
		if c := strings.Compare(a.instanceID, b.instanceID); c != 0 {
			return c
		}
	case a.instanceID != "":
		return -1
	case b.instanceID != "":
		return 1
	}
	return strings.Compare(a.id, b.id)
}

// uniform is the state of one run of the uniform assignor.
type uniform struct {
	spec  assignSpec
	subs  []map[string]bool // by member index
	held  []map[tp]bool     // by member index: partition → held strongly
	index map[string]int
}

func assignUniform(spec assignSpec) assignment {
	n := len(spec.members)
	u := uniform{spec: spec, subs: make([]map[string]bool, n), held: make([]map[tp]bool, n), index: make(map[string]int, n)}
	homogeneous := true
	for i, m := range spec.members {
		u.index[m.id] = i
		u.subs[i] = make(map[string]bool, len(m.subs))
		for _, t := range m.subs {
			u.subs[i][t] = true
		}
		u.held[i] = map[tp]bool{}
		if i > 0 && !slices.Equal(m.subs, spec.members[0].subs) {
			homogeneous = false
		}
	}
	// Keep every partition with its preferred member if that member still
	// subscribes to its topic.
	var free []tp
	for _, t := range spec.subscribedTopics() {
		for p := range spec.topics[t] {
			part := tp{t, p}
			h := spec.hints[part]
			if i, ok := u.index[h.strong]; ok && u.subs[i][t] {
				u.held[i][part] = true
			} else if i, ok := u.index[h.weak]; ok && u.subs[i][t] {
				u.held[i][part] = false
			} else {
				free = append(free, part)
			}
		}
	}
	if homogeneous {
		u.balanceHomogeneous(free)
	} else {
		u.balanceGeneral(free)
	}
	out := make(assignment, n)
	for i, m := range spec.members {
		s := make(partSet, len(u.held[i]))
		for p := range u.held[i] {
			s[p] = struct{}{}
		}
		out[m.id] = s
	}
	return out
}

// shedOrder lists the partitions of held in the order they are given up:
// weakly held ones first, then by descending partition.
func shedOrder(held map[tp]bool) []tp {
	ps := sortedKeys(held)
	slices.SortStableFunc(ps, func(a, b tp) int {
		if held[a] != held[b] {
			if held[a] {
				return 1
			}
			return -1
		}
		return -compareTP(a, b)
	})
	return ps
}

// balanceHomogeneous balances members that all subscribe to the same
// topics: with P partitions and n members, P%n members get P/n+1 and the
// others P/n. The members that hold the most keep the larger quotas, so the
// only partitions that move are those a member holds beyond its quota, which
// is the minimum: a member above its quota must give up the difference
// whatever the assignment.
func (u *uniform) balanceHomogeneous(free []tp) {
	n := len(u.held)
	if n == 0 {
		return
	}
	total := len(free)
	for i := range u.held {
		total += len(u.held[i])
	}
	q, r := total/n, total%n
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return -cmp.Compare(len(u.held[a]), len(u.held[b])) })
	quota := make([]int, n)
	for k, i := range order {
		quota[i] = q
		if k < r {
			quota[i]++
		}
	}
	pool := free
	for i := range u.held {
		if extra := len(u.held[i]) - quota[i]; extra > 0 {
			for _, p := range shedOrder(u.held[i])[:extra] {
				delete(u.held[i], p)
				pool = append(pool, p)
			}
		}
	}
	slices.SortFunc(pool, compareTP)
	// Deal the pool round-robin to the members below their quota, so that
	// the partitions of every topic spread over them.
	var under []int
	for i := range u.held {
		if len(u.held[i]) < quota[i] {
			under = append(under, i)
		}
	}
	k := 0
	for _, p := range pool {
		for len(u.held[under[k%len(under)]]) >= quota[under[k%len(under)]] {
			k++
		}
		u.held[under[k%len(under)]][p] = false
		k++
	}
}

// balanceGeneral balances members with different subscriptions. Free
// partitions go, most constrained topics first, to the subscribed member
// holding the fewest; then, while a member holds a partition of a topic
// that a member with at least two fewer partitions subscribes to, one such
// partition moves from the fullest such member to the emptiest. Each move
// lowers the sum of squared member sizes, so the loop ends, and at its end
// no such move is left.
func (u *uniform) balanceGeneral(free []tp) {
	subscribers := map[string][]int{}
	for _, t := range u.spec.subscribedTopics() {
		for i := range u.held {
			if u.subs[i][t] {
				subscribers[t] = append(subscribers[t], i)
			}
		}
	}
	slices.SortStableFunc(free, func(a, b tp) int {
		if c := cmp.Compare(len(subscribers[a.topic]), len(subscribers[b.topic])); c != 0 {
			return c
		}
		return compareTP(a, b)
	})
	for _, p := range free {
		best := -1
		for _, i := range subscribers[p.topic] {
			if best < 0 || len(u.held[i]) < len(u.held[best]) {
				best = i
			}
		}
		u.held[best][p] = false
	}
	order := make([]int, len(u.held))
	for {
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return -cmp.Compare(len(u.held[a]), len(u.held[b])) })
		if !u.moveOne(order) {
			return
		}
	}
}

// moveOne makes one balancing move between members ordered by descending
// size; it reports whether it found one.
func (u *uniform) moveOne(order []int) bool {
	for a, x := range order {
		var candidates []tp
		for b := len(order) - 1; b > a; b-- {
			y := order[b]
			if len(u.held[y])+2 > len(u.held[x]) {
				break
			}
			if candidates == nil {
				candidates = shedOrder(u.held[x])
			}
			var pick tp
			found := false
			for _, p := range candidates {
				if u.subs[y][p.topic] {
					pick, found = p, true
					break
				}
			}
			if found {
				delete(u.held[x], pick)
				u.held[y][pick] = false
				return true
			}
		}
	}
	return false
}
