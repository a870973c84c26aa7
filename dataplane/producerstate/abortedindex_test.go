package producerstate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/producerstate"
)

func TestAbortedIndexCodec(t *testing.T) {
	t.Parallel()
	for _, txns := range [][]producerstate.AbortedTxn{
		nil,
		{{ProducerID: 9, FirstOffset: 3, LastOffset: 10, LastStableOffset: 4}, {ProducerID: 1 << 40, FirstOffset: 0, LastOffset: 12, LastStableOffset: 13}},
	} {
		b := producerstate.EncodeAbortedIndex(txns)
		got, err := producerstate.DecodeAbortedIndex(b)
		require.NoError(t, err)
		require.Equal(t, txns, got)
		for i := range b {
			c := append([]byte{}, b...)
			c[i] ^= 0x10
			_, err := producerstate.DecodeAbortedIndex(c)
			require.ErrorIs(t, err, producerstate.ErrCorruptAbortedIndex, "byte %d flipped", i)
		}
		_, err = producerstate.DecodeAbortedIndex(b[:len(b)-1])
		require.ErrorIs(t, err, producerstate.ErrCorruptAbortedIndex)
	}
	bad := producerstate.EncodeAbortedIndex([]producerstate.AbortedTxn{{ProducerID: 9, FirstOffset: 5, LastOffset: 5}})
	_, err := producerstate.DecodeAbortedIndex(bad)
	require.ErrorIs(t, err, producerstate.ErrCorruptAbortedIndex, "a marker must follow the first batch")
}
