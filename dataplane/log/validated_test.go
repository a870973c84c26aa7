package log

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/record"
)

// TestLogAppendValidated: AppendValidated takes what ValidateLeaderBatch
// or EncodeLeaderBatch made, and still refuses what it can tell without
// the bytes' CRC: no batch at all (the zero value), a batch over the
// log's MaxBatchBytes, a negative epoch. EncodeLeaderBatch refuses
// records whose offset deltas are not 0..n-1; CheckLeaderRecords checks
// records without the CRC.
func TestLogAppendValidated(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{MaxBatchBytes: 2000})
	v, err := ValidateLeaderBatch(mkBatch(t, 2, 10, 0, "a"), 0)
	require.NoError(t, err)
	base, leo, err := l.AppendValidated(v, 3)
	require.NoError(t, err)
	require.EqualValues(t, 0, base)
	require.EqualValues(t, 2, leo)
	require.EqualValues(t, 0, v.Batch().BaseOffset(), "stamped in the caller's buffer")
	require.EqualValues(t, 3, v.Batch().LeaderEpoch())

	enc, err := EncodeLeaderBatch(nil, record.BatchHeader{}, []record.Record{{Value: []byte("x")}, {OffsetDelta: 1, Value: []byte("y")}})
	require.NoError(t, err)
	_, leo, err = l.AppendValidated(enc, 3)
	require.NoError(t, err)
	require.EqualValues(t, 4, leo)
	got := readAll(t, l)
	require.Len(t, got, 2)
	require.Equal(t, enc.Batch(), got[1], "read back with a good CRC")

	_, _, err = l.AppendValidated(ValidBatch{}, 3)
	require.ErrorIs(t, err, ErrInvalidBatch)
	big, err := ValidateLeaderBatch(mkBatch(t, 1, 3000, 0, "a"), 0)
	require.NoError(t, err, "valid under the default 8 MiB")
	_, _, err = l.AppendValidated(big, 3)
	require.ErrorIs(t, err, ErrInvalidBatch, "over this log's MaxBatchBytes")
	_, _, err = l.AppendValidated(v, -1)
	require.ErrorIs(t, err, ErrInvalidBatch)
	require.EqualValues(t, 4, l.LEO())

	_, err = EncodeLeaderBatch(nil, record.BatchHeader{}, []record.Record{{OffsetDelta: 0}, {OffsetDelta: 2}})
	require.ErrorIs(t, err, ErrInvalidBatch)

	plain := mkBatch(t, 2, 10, 0, "a")
	require.NoError(t, CheckLeaderRecords(plain))
	plain[len(plain)-1] = 0x7f // the last record's header count
	require.ErrorIs(t, CheckLeaderRecords(plain), ErrInvalidBatch)
	require.ErrorIs(t, CheckLeaderRecords(plain[:len(plain)-1]), ErrInvalidBatch, "length field and bytes disagree")
}

// TestLogAppendTime: a batch appended WithLogAppendTime is stamped under
// the write lock with the time of its append (its timestamp type and max
// timestamp, the CRC good), which the log's timestamp lookups then use.
func TestLogAppendTime(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{})
	v, err := ValidateLeaderBatch(mkBatch(t, 3, 10, 1000, "a"), 0)
	require.NoError(t, err)
	before := time.Now().UnixMilli()
	_, _, err = l.AppendValidated(v.WithLogAppendTime(), 0)
	require.NoError(t, err)
	after := time.Now().UnixMilli()
	got := readAll(t, l)
	require.Len(t, got, 1)
	h := got[0].Header()
	require.True(t, h.Attributes.LogAppendTime())
	require.GreaterOrEqual(t, h.MaxTimestamp, before)
	require.LessOrEqual(t, h.MaxTimestamp, after)
	require.Equal(t, h.MaxTimestamp, h.Timestamp(2), "every record's timestamp")
	require.Equal(t, int64(1000), h.FirstTimestamp, "the producer's times stay in the records")
	ts, ok, err := l.MaxTimestamp()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, h.MaxTimestamp, ts)
	off, ok, err := l.OffsetForTimestamp(1500)
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, off, "found by its append time, not its records' 1000-1002")

}
