package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplicaEndOffsetFor(t *testing.T) {
	t.Parallel()
	entries := []EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 3, StartOffset: 5}, {Epoch: 6, StartOffset: 9}}
	undefined := EpochEndOffset{Epoch: UndefinedEpoch, EndOffset: UndefinedOffset}
	for _, tc := range []struct {
		name    string
		entries []EpochEntry
		epoch   int32
		want    EpochEndOffset
	}{
		{"latest epoch ends at the LEO", entries, 6, EpochEndOffset{6, 12}},
		{"older epoch ends where the next starts", entries, 3, EpochEndOffset{3, 9}},
		{"missing epoch answers the largest below", entries, 5, EpochEndOffset{3, 9}},
		{"missing epoch between the first two", entries, 2, EpochEndOffset{1, 5}},
		{"epoch below every entry", []EpochEntry{{Epoch: 4, StartOffset: 7}}, 2, EpochEndOffset{2, 7}},
		{"epoch above every entry", entries, 7, undefined},
		{"undefined epoch", entries, UndefinedEpoch, undefined},
		{"no entries", nil, 1, undefined},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := EndOffsetFor(tc.entries, tc.epoch, 12)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.want == undefined, got.Undefined())
		})
	}
}

func TestReplicaAssignEpoch(t *testing.T) {
	t.Parallel()
	base := []EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 4}}
	require.Equal(t, append(base, EpochEntry{Epoch: 5, StartOffset: 6}), assignEpoch(base, 5, 6))
	require.Equal(t, []EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 5, StartOffset: 4}}, assignEpoch(base, 5, 4),
		"an epoch that wrote nothing is overridden")
	require.Equal(t, base, assignEpoch(base, 2, 9), "the latest epoch is kept")
	require.Equal(t, []EpochEntry{{Epoch: 3, StartOffset: 0}}, assignEpoch(nil, 3, 0))
}

func TestReplicaCheckEpochs(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkEpochs([]EpochEntry{{1, 0}, {2, 3}}, 3))
	for _, bad := range [][]EpochEntry{
		{{1, 0}, {1, 3}},
		{{1, 3}, {2, 3}},
		{{1, 0}, {2, 4}},
		{{-2, 0}},
	} {
		require.ErrorIs(t, checkEpochs(bad, 3), ErrInvalid, "%v", bad)
	}
}

func TestReplicaFormatIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "(1,2,3)", FormatIDs([]int32{1, 2, 3}))
	require.Equal(t, "()", FormatIDs(nil))
}
