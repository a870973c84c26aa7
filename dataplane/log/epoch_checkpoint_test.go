package log

import (
	"github.com/sluicemq/sluice/record"

	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// epochsOfBatches derives the leader-epoch cache from the batches
// themselves: the first offset of each epoch (the log here starts at 0 and
// retention never runs, so this is the ground truth).
func epochsOfBatches(batches []record.Batch) []EpochEntry {
	var out []EpochEntry
	for _, b := range batches {
		if n := len(out); n == 0 || out[n-1].Epoch != b.LeaderEpoch() {
			out = append(out, EpochEntry{Epoch: b.LeaderEpoch(), StartOffset: b.BaseOffset()})
		}
	}
	return out
}

// requireSameEpochs checks that got answers every epoch question as want.
func requireSameEpochs(t *testing.T, want, got *Log, msg string) {
	t.Helper()
	require.Equal(t, want.Epochs(), got.Epochs(), msg)
	require.Equal(t, want.LEO(), got.LEO(), msg)
	for e := int32(-1); e <= 300; e++ {
		we, wo := want.EndOffsetFor(e)
		ge, go_ := got.EndOffsetFor(e)
		require.Equal(t, [2]int64{int64(we), wo}, [2]int64{int64(ge), go_}, "%s: EndOffsetFor(%d)", msg, e)
	}
}

// followerBatches builds leader-stamped batches starting at base, one per
// epoch in epochs, for AppendFollower.
func followerBatches(t *testing.T, base int64, epochs ...int32) []byte {
	var out []byte
	for i, e := range epochs {
		b := mkBatch(t, 2, 60, int64(i), fmt.Sprint(base, "/", i))
		record.Batch(b).SetLeader(base, e)
		base += 2
		out = append(out, b...)
	}
	return out
}

// TestLogEpochCheckpointNotWrittenByAppend: a batch that starts a new
// epoch in the active segment leaves the checkpoint file alone (same file,
// same contents); a roll and Close write it.
func TestLogEpochCheckpointNotWrittenByAppend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 100 << 10}
	l := openLog(t, dir, cfg)
	path := filepath.Join(dir, epochCheckpointName)
	_, _, err := l.Append(mkBatch(t, 2, 50, 0, "a"), 0)
	require.NoError(t, err)
	require.NoError(t, l.Roll())
	before, err := os.Stat(path)
	require.NoError(t, err, "roll writes the checkpoint")
	content, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, encodeEpochs([]EpochEntry{{0, 0}}), content)

	for e := int32(1); e <= 5; e++ {
		_, _, err := l.Append(mkBatch(t, 2, 50, 0, "b"), 3*e)
		require.NoError(t, err)
		_, err = l.AppendFollower(followerBatches(t, l.LEO(), 3*e+1, 3*e+2))
		require.NoError(t, err)
	}
	require.Len(t, l.Epochs(), 16)
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "the checkpoint was replaced by an append")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, content, got)

	want := l.Epochs()
	require.NoError(t, l.Close())
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, encodeEpochs(want), got, "Close writes the checkpoint")
	l2 := openLog(t, dir, cfg)
	require.Equal(t, want, l2.Epochs())
}

// TestLogEpochsSurviveCrash crashes (copies the directory without Close)
// after appends that start epochs in the active segment, in segments that
// were rolled since, and at every step of a roll; each reopened copy
// answers every epoch question as the log did, and its cache is the one
// its batches imply.
func TestLogEpochsSurviveCrash(t *testing.T) {
	t.Parallel()
	for _, flush := range []FlushPolicy{FlushAlways, FlushOS} {
		t.Run(flush.String(), func(t *testing.T) {
			t.Parallel()
			cfg := Config{SegmentBytes: 1200, IndexIntervalBytes: 100, Flush: flush}
			dir := t.TempDir()
			l := openLog(t, dir, cfg)
			type crashCopy struct{ step, dir string }
			var copies []crashCopy
			l.crashPoint = func(step string) { copies = append(copies, crashCopy{step, copyDir(t, dir)}) }

			crashNow := func(msg string) {
				t.Helper()
				l2 := openLog(t, copyDir(t, dir), cfg)
				requireSameEpochs(t, l, l2, msg)
				require.Equal(t, readAll(t, l), readAll(t, l2), msg)
				// Crash the recovered log again right away, and after a
				// clean Close: both keep the epochs.
				l3 := openLog(t, copyDir(t, l2.dir), cfg)
				requireSameEpochs(t, l, l3, msg+", second crash")
				require.NoError(t, l3.Close())
				l4 := openLog(t, l3.dir, cfg)
				requireSameEpochs(t, l, l4, msg+", after Close")
			}

			epoch := int32(0)
			for round := range 6 {
				// New epochs in the active segment, as leader and as follower.
				epoch++
				_, _, err := l.Append(mkBatch(t, 2, 60, int64(round), "l"), epoch)
				require.NoError(t, err)
				crashNow(fmt.Sprintf("round %d: leader epoch %d", round, epoch))
				epoch++
				_, err = l.AppendFollower(followerBatches(t, l.LEO(), epoch, epoch, epoch+1))
				require.NoError(t, err)
				epoch++
				crashNow(fmt.Sprintf("round %d: follower epochs to %d", round, epoch))
				// Rolls inside one follower append: epochs that start
				// before, at and after the roll.
				copies = copies[:0]
				var es []int32
				for range 8 {
					epoch++
					es = append(es, epoch, epoch)
				}
				_, err = l.AppendFollower(followerBatches(t, l.LEO(), es...))
				require.NoError(t, err)
				require.NotEmpty(t, copies, "round %d: the append rolled", round)
				for _, c := range copies {
					// Larger segments: the appends below must not roll.
					big := cfg
					big.SegmentBytes = 1 << 20
					l2 := openLog(t, c.dir, big)
					msg := fmt.Sprintf("round %d: crash at %s", round, c.step)
					batches := readAll(t, l2)
					require.Equal(t, epochsOfBatches(batches), l2.Epochs(), msg)
					require.Equal(t, readAll(t, l)[:len(batches)], batches, msg)
					// The crash may have left entries past the recovered
					// LEO in the checkpoint: appending the next epoch
					// there and crashing again must not bring them back.
					// (Skipping an epoch, so that it differs from what
					// the checkpoint says about this offset.)
					next := int32(0)
					if es := l2.Epochs(); len(es) > 0 {
						next = es[len(es)-1].Epoch + 2
					}
					_, _, err := l2.Append(mkBatch(t, 1, 10, 0, "again"), next)
					require.NoError(t, err)
					l3 := openLog(t, copyDir(t, c.dir), big)
					require.Equal(t, epochsOfBatches(readAll(t, l3)), l3.Epochs(), msg+", crash after an append")
					require.NoError(t, l2.Close())
					require.NoError(t, l3.Close())
				}
				crashNow(fmt.Sprintf("round %d: after rolls", round))
				if round%3 == 2 {
					require.NoError(t, l.Roll())
					crashNow(fmt.Sprintf("round %d: after Roll", round))
				}
				require.Equal(t, epochsOfBatches(readAll(t, l)), l.Epochs())
			}
			require.Greater(t, len(l.ClosedSegments()), 5)
		})
	}
}
