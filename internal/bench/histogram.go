package bench

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear, as HdrHistogram's: values below
// 2·subCount nanoseconds have a bucket each; above, every power of two
// [2^k, 2^(k+1)) is cut into subCount buckets of equal width. A bucket's
// width is then at most 1/subCount of its lower bound, and reporting its
// midpoint is off by at most half that.
const (
	subBits  = 7
	subCount = 1 << subBits
	// nBuckets covers every non-negative int64: the largest shift is
	// 63 − subBits − 1.
	nBuckets = 2*subCount + (63-subBits-1)*subCount
)

// RelativeError bounds how far a reported quantile is from the recorded
// value it stands for: |reported − exact| ≤ RelativeError × exact
// (1/256, under 0.4 %). Min, Max and Mean are exact.
const RelativeError = 1.0 / (2 * subCount)

// Histogram records durations with bounded relative error (RelativeError)
// in a fixed 58 KiB, whatever their number or range: from 1 ns to the
// largest time.Duration. The zero value is empty and ready. It is not safe
// for concurrent use.
type Histogram struct {
	counts   []uint64 // nBuckets, allocated by the first Record
	n        uint64
	sum      float64 // nanoseconds
	min, max int64
}

// bucketOf is the index of v's bucket.
func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // v>>shift is in [subCount, 2·subCount)
	return 2*subCount + (shift-1)*subCount + int(v>>shift) - subCount
}

// bucketRange is bucket i's lowest value and its width.
func bucketRange(i int) (low, width uint64) {
	if i < 2*subCount {
		return uint64(i), 1
	}
	j := i - 2*subCount
	shift := j/subCount + 1
	return uint64(j%subCount+subCount) << shift, 1 << shift
}

// Record adds d; a negative d counts as 0.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	if h.counts == nil {
		h.counts = make([]uint64, nBuckets)
	}
	h.counts[bucketOf(uint64(v))]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if h.n == 0 || v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, nBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.n == 0 || o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Reset empties h, keeping its memory.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.n, h.sum, h.min, h.max = 0, 0, 0, 0
}

// Count is the number of recorded values.
func (h *Histogram) Count() int64 { return int64(h.n) }

// Min is the smallest recorded value, 0 when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest recorded value, 0 when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the average recorded value, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.n)))
}

// Quantile returns the q-quantile (0 < q ≤ 1) by nearest rank: the value
// at rank ⌈q·n⌉ of the sorted values, within RelativeError; 0 when empty.
// Quantile(1) is Max.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return time.Duration(h.max)
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		low, width := bucketRange(i)
		mid := int64(low + (width-1)/2)
		return time.Duration(min(max(mid, h.min), h.max))
	}
	return time.Duration(h.max) // not reached: the counts add up to n
}
