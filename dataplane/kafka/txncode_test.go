package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/derr"
)

// TestTxnCodeByVersion: PRODUCER_FENCED and TRANSACTION_ABORTABLE are
// answered as such to the versions that know them and as
// INVALID_PRODUCER_EPOCH to the ones before; other codes pass unchanged.
func TestTxnCodeByVersion(t *testing.T) {
	fenced := derr.New(derr.ProducerFenced, "fenced")
	abortable := derr.New(derr.TransactionAbortable, "timed out")
	for _, c := range []struct {
		name  string
		err   error
		known txnCodes
		want  int16
	}{
		{"fenced, known", fenced, txnCodes{fenced: true}, kerr.ProducerFenced.Code},
		{"fenced, before KIP-588", fenced, txnCodes{abortable: true}, kerr.InvalidProducerEpoch.Code},
		{"abortable, known", abortable, txnCodes{abortable: true}, kerr.TransactionAbortable.Code},
		{"abortable, before KIP-890", abortable, txnCodes{fenced: true}, kerr.InvalidProducerEpoch.Code},
		{"other", derr.New(derr.InvalidTxnState, "no"), txnCodes{}, kerr.InvalidTxnState.Code},
		{"none", nil, txnCodes{}, 0},
	} {
		if got := txnCode(c.err, c.known); got != c.want {
			t.Errorf("%s: code %d, want %d", c.name, got, c.want)
		}
	}
}

// TestConsumerSubscriptions: a classic group's subscribed topics are read
// from its members' consumer-protocol metadata; another protocol type, or
// metadata that does not parse, says they cannot be told (so OffsetDelete
// deletes nothing under a member).
func TestConsumerSubscriptions(t *testing.T) {
	md := func(topics ...string) []byte {
		m := kmsg.NewConsumerMemberMetadata()
		m.Topics = topics
		return m.AppendTo(nil)
	}
	topics, ok := consumerSubscriptions(consumerProtocol, [][]byte{md("a", "b"), md("c")})
	if !ok || len(topics) != 3 || topics[0] != "a" || topics[2] != "c" {
		t.Errorf("consumer protocol: %v %v, want [a b c] true", topics, ok)
	}
	if _, ok := consumerSubscriptions("connect", [][]byte{md("a")}); ok {
		t.Error("another protocol type: told")
	}
	if _, ok := consumerSubscriptions(consumerProtocol, [][]byte{{0xff}}); ok {
		t.Error("unreadable metadata: told")
	}
}
