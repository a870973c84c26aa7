package txn

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
)

// TestTxnRecordsCompatibleWithV1: the transaction-state topic's records
// moved from the public sluice.v1 package to sluice.coordinator.v1 with
// the same field numbers and types (the enums with the same numbers), so
// records on disk written by the first version decode unchanged. The hex
// strings are what sluice.v1.TxnRecordKey/TxnRecordValue encoded, every
// field set; each decodes to the same values and the same Transaction, and
// encodes back to the same bytes.
func TestTxnRecordsCompatibleWithV1(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, v1 string
		msg      proto.Message
	}{
		{"key", "0a0874656e616e742d611203617070", &coordinatorv1.TxnRecordKey{TenantId: "tenant-a", TransactionalId: "app"}},
		{"value", "08e907100218e0d40320032a120a0e30623666376134652d746f70696310072a040a023163320762696c6c696e673205617564697438c8a3f1c2b1344081a0f1c2b13448d20f50e90758016002",
			&coordinatorv1.TxnRecordValue{ProducerId: 1001, ProducerEpoch: 2, TimeoutMs: 60000, State: coordinatorv1.TxnState_TXN_STATE_PREPARE_COMMIT,
				Partitions: []*coordinatorv1.TxnPartition{{TopicId: "0b6f7a4e-topic", Partition: 7}, {TopicId: "1c", Partition: 0}}, Groups: []string{"billing", "audit"},
				UpdateTimeMs: 1800000000456, StartTimeMs: 1800000000001, NextProducerId: 2002, LastProducerId: 1001, LastProducerEpoch: 1, EndedBy: coordinatorv1.TxnEndedBy_TXN_ENDED_BY_TIMEOUT}},
		{"value with defaults", "0805200150ffffffffffffffffff0158ffffffffffffffffff01",
			&coordinatorv1.TxnRecordValue{ProducerId: 5, State: coordinatorv1.TxnState_TXN_STATE_EMPTY, LastProducerId: -1, LastProducerEpoch: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			old, err := hex.DecodeString(c.v1)
			require.NoError(t, err)
			got := c.msg.ProtoReflect().New().Interface()
			require.NoError(t, proto.Unmarshal(old, got))
			require.Empty(t, got.ProtoReflect().GetUnknown(), "every field known")
			require.True(t, proto.Equal(c.msg, got), "decoded %v, want %v", got, c.msg)
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.msg)
			require.NoError(t, err)
			require.Equal(t, c.v1, hex.EncodeToString(b))
		})
	}
	// The Transaction the first version's value stands for.
	old, _ := hex.DecodeString("08e907100218e0d40320032a120a0e30623666376134652d746f70696310072a040a023163320762696c6c696e673205617564697438c8a3f1c2b1344081a0f1c2b13448d20f50e90758016002")
	v := &coordinatorv1.TxnRecordValue{}
	require.NoError(t, proto.Unmarshal(old, v))
	tx := fromProto(v)
	require.Equal(t, StatePrepareCommit, tx.State)
	require.Equal(t, EndedByTimeout, tx.EndedBy)
	require.Equal(t, []TopicPartition{{"0b6f7a4e-topic", 7}, {"1c", 0}}, tx.Partitions)
	require.EqualValues(t, 2002, tx.NextProducerID)
	require.EqualValues(t, 1, tx.LastEpoch)
}
