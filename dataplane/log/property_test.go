package log

import (
	"github.com/sluicemq/sluice/record"

	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLogProperty runs random appends, reads, rolls, truncations, retention
// and restarts against a model (the list of batches the log should hold),
// with a file cache of its own and with one of capacity 1 (every segment
// file use but the last one's reopens the file).
func TestLogProperty(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG((seed+1)/2, 0))
			cfg := Config{
				SegmentBytes:       int64(500 + rng.IntN(3000)),
				IndexIntervalBytes: 1 + rng.IntN(600),
				RetentionBytes:     int64(2000 + rng.IntN(6000)),
				Flush:              FlushPolicy(rng.IntN(3)),
			}
			if seed%2 == 0 {
				cfg.Files = NewFileCache(1)
			}
			dir := t.TempDir()
			l, err := Open(dir, cfg)
			require.NoError(t, err)
			defer func() { _ = l.Close() }()
			var model [][]byte // batches from LogStartOffset on
			epoch := int32(0)
			check := func(step int) {
				start := int64(0)
				if len(model) > 0 {
					start = record.Batch(model[0]).BaseOffset()
				} else {
					start = l.LEO()
				}
				require.Equal(t, start, l.LogStartOffset(), "step %d", step)
				leo := start
				if len(model) > 0 {
					leo = record.Batch(model[len(model)-1]).LastOffset() + 1
				}
				require.Equal(t, leo, l.LEO(), "step %d", step)
			}
			for step := range 400 {
				switch op := rng.IntN(100); {
				case op < 50:
					if rng.IntN(20) == 0 {
						epoch++
					}
					b := mkBatch(t, 1+rng.IntN(5), rng.IntN(300), int64(step), fmt.Sprint(step))
					_, _, err := l.Append(b, epoch)
					require.NoError(t, err)
					model = append(model, b)
				case op < 75 && len(model) > 0:
					i := rng.IntN(len(model))
					b := record.Batch(model[i])
					off := b.BaseOffset() + rng.Int64N(b.LastOffset()-b.BaseOffset()+1)
					max := rng.IntN(2000)
					data, err := l.Read(off, max)
					require.NoError(t, err, "step %d", step)
					var want []byte
					for j := i; j < len(model); j++ {
						if j > i && len(want)+len(model[j]) > max {
							break
						}
						want = append(want, model[j]...)
					}
					require.LessOrEqual(t, len(data), len(want), "step %d", step)
					require.Equal(t, want[:len(data)], data, "step %d: read at %d", step, off)
					require.GreaterOrEqual(t, len(data), len(model[i]), "step %d: one whole batch", step)
				case op < 80:
					require.NoError(t, l.Roll())
				case op < 86 && len(model) > 0:
					i := rng.IntN(len(model))
					b := record.Batch(model[i])
					off := b.BaseOffset() + rng.Int64N(b.LastOffset()-b.BaseOffset()+1)
					require.NoError(t, l.TruncateTo(off))
					model = model[:i]
					if len(model) == 0 && i == 0 {
						// Everything from the log start is gone.
						model = nil
					}
				case op < 92:
					_, err := l.ApplyRetention()
					require.NoError(t, err)
					for len(model) > 0 && record.Batch(model[0]).BaseOffset() < l.LogStartOffset() {
						model = model[1:]
					}
				case op < 96:
					require.NoError(t, l.Close())
					l, err = Open(dir, cfg)
					require.NoError(t, err)
				default:
					// A crash: reopen a copy taken without Close.
					require.NoError(t, l.Sync())
					crash := copyDir(t, dir)
					require.NoError(t, l.Close())
					dir = crash
					l, err = Open(dir, cfg)
					require.NoError(t, err)
				}
				check(step)
				for _, e := range l.Epochs() {
					require.GreaterOrEqual(t, e.StartOffset, l.LogStartOffset())
					require.Less(t, e.StartOffset, l.LEO())
				}
			}
			got := readAll(t, l)
			require.Len(t, got, len(model))
			for i := range got {
				require.Equal(t, model[i], []byte(got[i]))
			}
		})
	}
}
