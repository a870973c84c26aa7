package metering

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMeteringTimesSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ h, ms, want int64 }{
		{1000, 10_000, 10_000},
		{1, 999, 0}, // rounded down
		{3, 1500, 4},
		{0, 10_000, 0},
		{-5, 10_000, 0},
		{10 << 50, 3_600_000, math.MaxInt64}, // 10 PiB for an hour: past int64, saturated
		{100 << 40, 3_600_000, (100 << 40) * 3600},
		{1 << 40, 3_600_000, (1 << 40) * 3600},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
	} {
		require.Equal(t, tc.want, timesSeconds(tc.h, tc.ms), "%d × %d ms", tc.h, tc.ms)
	}
}
