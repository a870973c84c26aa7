package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchHistogramBuckets walks every bucket: its lowest and highest
// values map to it, the buckets tile the int64 range without gap or
// overlap, and the value reported for any of its members is within
// RelativeError of it.
func TestBenchHistogramBuckets(t *testing.T) {
	t.Parallel()
	next := uint64(0)
	for i := range nBuckets {
		low, width := bucketRange(i)
		require.Equal(t, next, low, "bucket %d starts where %d ends", i, i-1)
		high := low + width - 1
		require.Equal(t, i, bucketOf(low), "lowest value of bucket %d", i)
		require.Equal(t, i, bucketOf(high), "highest value of bucket %d", i)
		mid := low + (width-1)/2
		for _, v := range []uint64{low, high} {
			if v == 0 {
				continue
			}
			err := math.Abs(float64(mid) - float64(v))
			require.LessOrEqual(t, err, RelativeError*float64(v), "bucket %d [%d, %d]: reports %d for %d", i, low, high, mid, v)
		}
		next = high + 1
	}
	require.Equal(t, uint64(math.MaxInt64), next-1, "the last bucket ends at the largest int64")
}

// TestBenchHistogramQuantilesMatchExactSort: on random latencies spread
// over nine decades (1 µs to 1000 s, log-uniform, plus a cluster of equal
// values and some zeros), every quantile is within RelativeError of the
// exact nearest-rank quantile of the sorted values, and count, min, max
// and mean are exact.
func TestBenchHistogramQuantilesMatchExactSort(t *testing.T) {
	t.Parallel()
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 42))
		var h Histogram
		var vals []time.Duration
		var sum float64
		for i := range 100_000 {
			var v time.Duration
			switch {
			case i%50 == 0:
				v = 0
			case i%7 == 0:
				v = 2*time.Millisecond + 117*time.Nanosecond
			default:
				v = time.Duration(math.Pow(10, 3+9*rng.Float64()))
			}
			h.Record(v)
			vals = append(vals, v)
			sum += float64(v)
		}
		slices.Sort(vals)
		require.EqualValues(t, len(vals), h.Count())
		require.Equal(t, vals[0], h.Min())
		require.Equal(t, vals[len(vals)-1], h.Max())
		require.InDelta(t, sum/float64(len(vals)), float64(h.Mean()), 1)
		for _, q := range []float64{0.00001, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1} {
			rank := int(math.Ceil(q * float64(len(vals))))
			exact := vals[rank-1]
			got := h.Quantile(q)
			require.LessOrEqual(t, math.Abs(float64(got-exact)), RelativeError*float64(exact),
				"seed %d q=%v: got %v, exact %v", seed, q, got, exact)
		}
	}
}

// TestBenchHistogramMergeAndReset: merging two histograms gives the
// histogram of all their values; Reset empties one.
func TestBenchHistogramMergeAndReset(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b, all Histogram
	for range 10_000 {
		v := time.Duration(rng.Int64N(int64(time.Second)))
		if rng.IntN(2) == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
		all.Record(v)
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{}) // empty: no change
	require.Equal(t, all.Count(), m.Count())
	require.Equal(t, all.Min(), m.Min())
	require.Equal(t, all.Max(), m.Max())
	for _, q := range []float64{0.5, 0.99, 0.999} {
		require.Equal(t, all.Quantile(q), m.Quantile(q))
	}

	m.Reset()
	require.Zero(t, m.Count())
	require.Zero(t, m.Quantile(0.5))
	require.Zero(t, m.Max())
	m.Record(3 * time.Millisecond)
	require.Equal(t, 3*time.Millisecond, m.Min(), "after Reset the next value is the min")
	require.Equal(t, 3*time.Millisecond, m.Quantile(0.5))

	var empty Histogram
	require.Zero(t, empty.Mean())
	empty.Record(-time.Second)
	require.Zero(t, empty.Max(), "a negative value counts as 0")
}
