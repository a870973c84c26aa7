package groups

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lagFixture: three groups of one tenant, ranked a (oldest record 100 s),
// b (50 s), c (10 s). a has 4 partitions of one topic, b 3 over two topics,
// c 2 of one topic: 9 per-partition or 4 per-topic label sets.
func lagFixture() []lagRow {
	return []lagRow{
		{"t1", "c", "orders", 0, 5, 10}, {"t1", "c", "orders", 1, 1, 2},
		{"t1", "a", "orders", 0, 10, 100}, {"t1", "a", "orders", 1, 20, 40},
		{"t1", "a", "orders", 2, 0, 0}, {"t1", "a", "orders", 3, 7, 90},
		{"t1", "b", "orders", 0, 3, 50}, {"t1", "b", "orders", 1, 4, 30},
		{"t1", "b", "payments", 0, 100, 20},
	}
}

func partitionSeries(rows []lagRow, group string) []lagSeries {
	var out []lagSeries
	for _, r := range rows {
		if r.group == group {
			out = append(out, lagSeries{r.tenant, r.group, r.topic, strconv.Itoa(int(r.partition)), r.messages, r.seconds})
		}
	}
	return out
}

func TestGroupLagCap(t *testing.T) {
	t.Parallel()
	rows := lagFixture()
	aAll := []lagSeries{{"t1", "a", "orders", "all", 37, 100}}
	bAll := []lagSeries{{"t1", "b", "orders", "all", 7, 50}, {"t1", "b", "payments", "all", 100, 20}}
	cAll := []lagSeries{{"t1", "c", "orders", "all", 6, 10}}
	cat := func(ss ...[]lagSeries) []lagSeries {
		var out []lagSeries
		for _, s := range ss {
			out = append(out, s...)
		}
		return out
	}
	for _, tc := range []struct {
		name               string
		max                int
		want               []lagSeries
		truncated, omitted int
	}{
		{name: "everything fits", max: 9,
			want: cat(partitionSeries(rows, "a"), partitionSeries(rows, "b"), partitionSeries(rows, "c"))},
		{name: "the least-lagging group is aggregated per topic", max: 8,
			want: cat(partitionSeries(rows, "a"), partitionSeries(rows, "b"), cAll), truncated: 1},
		{name: "the worst group keeps detail before the smaller groups", max: 7,
			want: cat(partitionSeries(rows, "a"), bAll, cAll), truncated: 2},
		{name: "no detail fits: every group per topic", max: 6,
			want: cat(aAll, bAll, cAll), truncated: 3},
		{name: "per-topic series do not all fit: the least-lagging group is omitted", max: 3,
			want: cat(aAll, bAll), truncated: 2, omitted: 1},
		{name: "a cap below the worst group's topics omits every group", max: 0,
			want: nil, omitted: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := capLagSeries(rows, tc.max)
			require.ElementsMatch(t, tc.want, got.series)
			require.LessOrEqual(t, len(got.series), tc.max)
			require.Equal(t, tc.truncated, got.truncated, "truncated")
			require.Equal(t, tc.omitted, got.omitted, "omitted")
		})
	}
}

func TestGroupLagCapRanksByAgeThenRecordsThenName(t *testing.T) {
	t.Parallel()
	rows := []lagRow{
		// Same age: more records behind ranks first.
		{"t1", "few", "orders", 0, 1, 60}, {"t1", "few", "orders", 1, 1, 0},
		{"t1", "many", "orders", 0, 50, 60}, {"t1", "many", "orders", 1, 0, 0},
		// All equal: tenant, then group id.
		{"t2", "y", "orders", 0, 1, 5}, {"t2", "y", "orders", 1, 1, 5},
		{"t2", "x", "orders", 0, 1, 5}, {"t2", "x", "orders", 1, 1, 5},
	}
	// 4 per-topic label sets + one group's extra partition = 5.
	got := capLagSeries(rows, 5)
	require.Equal(t, 3, got.truncated)
	detailed := map[string]bool{}
	for _, s := range got.series {
		if s.partition != "all" {
			detailed[s.group] = true
		}
	}
	require.Equal(t, map[string]bool{"many": true}, detailed)

	got = capLagSeries(rows, 7) // many, few, then x before y
	require.Equal(t, 1, got.truncated)
	require.Contains(t, got.series, lagSeries{"t2", "x", "orders", "1", 1, 5})
	require.Contains(t, got.series, lagSeries{"t2", "y", "orders", "all", 2, 5})
}

// The output depends on the rows, not their order, and never repeats a
// label set (a scrape with a duplicate fails whole).
func TestGroupLagCapIsDeterministicAndUnique(t *testing.T) {
	t.Parallel()
	rows := append(lagFixture(), lagRow{"t1", "a", "orders", 0, 10, 100}) // a duplicate row
	want := capLagSeries(rows, 8)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := append([]lagRow(nil), rows...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		require.Equal(t, want, capLagSeries(shuffled, 8))
	}
	seen := map[lagSeries]bool{}
	for _, s := range want.series {
		k := lagSeries{tenant: s.tenant, group: s.group, topic: s.topic, partition: s.partition}
		require.False(t, seen[k], "label set %v twice", k)
		seen[k] = true
	}
}

// Random inputs: the cap holds, every group is exported at exactly one
// level, aggregates add up, and detail never skips a group that lags more.
func TestGroupLagCapInvariants(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	for iter := range 200 {
		var rows []lagRow
		groups := 1 + r.IntN(30)
		for g := range groups {
			for tp := range 1 + r.IntN(3) {
				for p := range 1 + r.IntN(8) {
					rows = append(rows, lagRow{fmt.Sprintf("t%d", g%3), fmt.Sprintf("g%d", g), fmt.Sprintf("topic%d", tp), int32(p), r.Int64N(1000), float64(r.IntN(5)) * 30})
				}
			}
		}
		maxSeries := r.IntN(len(rows) + 10)
		got := capLagSeries(rows, maxSeries)
		require.LessOrEqual(t, len(got.series), maxSeries, "iteration %d", iter)

		type gk struct{ tenant, group string }
		level := map[gk]string{}
		sums := map[[3]string]int64{}
		oldest := map[[3]string]float64{}
		worst := map[gk]float64{}
		for _, row := range rows {
			sums[[3]string{row.tenant, row.group, row.topic}] += row.messages
			oldest[[3]string{row.tenant, row.group, row.topic}] = max(oldest[[3]string{row.tenant, row.group, row.topic}], row.seconds)
			worst[gk{row.tenant, row.group}] = max(worst[gk{row.tenant, row.group}], row.seconds)
		}
		for _, s := range got.series {
			l := "partition"
			if s.partition == "all" {
				l = "topic"
				require.Equal(t, sums[[3]string{s.tenant, s.group, s.topic}], s.messages, "aggregate sums the topic's records")
				require.Equal(t, oldest[[3]string{s.tenant, s.group, s.topic}], s.seconds, "aggregate takes the topic's oldest record")
			}
			k := gk{s.tenant, s.group}
			require.Contains(t, []string{"", l}, level[k], "group %v exported at one level", k)
			level[k] = l
		}
		counts := map[string]int{}
		for k := range worst {
			counts[level[k]]++
		}
		require.Equal(t, got.truncated, counts["topic"], "iteration %d", iter)
		require.Equal(t, got.omitted, counts[""], "iteration %d", iter)
		for a := range worst {
			for b := range worst {
				if worst[a] > worst[b] {
					require.GreaterOrEqual(t, rank(level[a]), rank(level[b]), "group %v lags more than %v", a, b)
				}
			}
		}
	}
}

func rank(level string) int {
	return map[string]int{"": 0, "topic": 1, "partition": 2}[level]
}

// TestGroupLagRoundTimeout: a round has its interval, and never less than
// MinLagRound.
func TestGroupLagRoundTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ interval, want time.Duration }{
		{100 * time.Millisecond, MinLagRound},
		{MinLagRound, MinLagRound},
		{30 * time.Second, 30 * time.Second},
	} {
		require.Equal(t, c.want, LagRoundTimeout(c.interval), "interval %s", c.interval)
	}
}
