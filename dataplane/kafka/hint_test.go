package kafka_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sluicemq/sluice/record"
)

// TestLeaderHints (KIP-951): a Produce (v10+) or Fetch (v12+) sent to a
// broker that does not lead the partition is answered
// NOT_LEADER_OR_FOLLOWER with the current leader and its epoch, and (Produce
// v10+, Fetch v16+) the leader's endpoint, so that a client goes straight
// there without a Metadata round trip; older versions get the error alone.
func TestLeaderHints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cl := client(t)
	adm := kadm.NewClient(cl)
	name := fmt.Sprintf("hint-%d", time.Now().UnixNano())
	createTopic(t, adm, name, 1)
	md, err := adm.Metadata(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	pm := md.Topics[name].Partitions[0]
	leader, other := pm.Leader, int32(-1)
	var la kadm.BrokerDetail
	for _, b := range md.Brokers {
		switch {
		case b.NodeID == leader:
			la = b
		case other < 0:
			other = b.NodeID
		}
	}
	hinted := func(what string, id, epoch int32, brokers []kmsg.ProduceResponseBroker, fbrokers []kmsg.FetchResponseBroker, wantEndpoint bool) {
		t.Helper()
		if id != leader || epoch != pm.LeaderEpoch {
			t.Errorf("%s: current leader %d epoch %d, want %d epoch %d", what, id, epoch, leader, pm.LeaderEpoch)
		}
		var eps []string
		for _, b := range brokers {
			eps = append(eps, fmt.Sprintf("%d@%s", b.NodeID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))))
		}
		for _, b := range fbrokers {
			eps = append(eps, fmt.Sprintf("%d@%s", b.NodeID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))))
		}
		want := fmt.Sprintf("%d@%s", leader, net.JoinHostPort(la.Host, strconv.Itoa(int(la.Port))))
		switch {
		case wantEndpoint && (len(eps) != 1 || eps[0] != want):
			t.Errorf("%s: endpoints %v, want [%s]", what, eps, want)
		case !wantEndpoint && len(eps) != 0:
			t.Errorf("%s: endpoints %v, want none", what, eps)
		}
	}

	for _, version := range []int16{9, 11} {
		req := produceRequest(name, -1, 10000, kafkaBatch(t, []byte("v")))
		req.SetVersion(version)
		res, err := req.RequestWith(ctx, pinned(t, req.Key(), version).Broker(int(other)))
		if err != nil {
			t.Fatal(err)
		}
		pr := res.Topics[0].Partitions[0]
		if pr.ErrorCode != kerr.NotLeaderForPartition.Code {
			t.Fatalf("produce v%d at broker %d: error %d, want NOT_LEADER_OR_FOLLOWER", version, other, pr.ErrorCode)
		}
		if res.Version != version {
			t.Fatalf("produce sent at v%d, want v%d", res.Version, version)
		}
		if version >= 10 {
			hinted(fmt.Sprintf("produce v%d", version), pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch, res.Brokers, nil, true)
		}
	}
	for _, version := range []int16{11, 12, 16} {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(version)
		req.MaxWaitMillis, req.MaxBytes = 10, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = name, md.Topics[name].ID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = 1<<20, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		res, err := req.RequestWith(ctx, pinned(t, req.Key(), version).Broker(int(other)))
		if err != nil {
			t.Fatal(err)
		}
		if res.Version != version {
			t.Fatalf("fetch sent at v%d, want v%d", res.Version, version)
		}
		pr := res.Topics[0].Partitions[0]
		if pr.ErrorCode != kerr.NotLeaderForPartition.Code {
			t.Fatalf("fetch v%d at broker %d: error %d, want NOT_LEADER_OR_FOLLOWER", version, other, pr.ErrorCode)
		}
		switch {
		case version >= 12:
			hinted(fmt.Sprintf("fetch v%d", version), pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch, nil, res.Brokers, version >= 16)
		case pr.CurrentLeader.LeaderID != -1:
			t.Errorf("fetch v%d: a current leader %d in a version without the field", version, pr.CurrentLeader.LeaderID)
		}
	}
}

// pinned is a client of the test tenant that sends key at version at
// most (franz-go sends the highest version both sides support).
func pinned(t *testing.T, key, version int16) *kgo.Client {
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(key, version)
	return client(t, kgo.MaxVersions(vs))
}

// kafkaBatch is a Kafka RecordBatch v2 of one record with value, without
// a producer id.
func kafkaBatch(t *testing.T, value []byte) []byte {
	t.Helper()
	return kafkaBatchAt(t, value, time.Now().UnixMilli())
}

// kafkaBatchAt is kafkaBatch with the record's timestamp ts.
func kafkaBatchAt(t *testing.T, value []byte, ts int64) []byte {
	t.Helper()
	batch, err := record.AppendBatch(nil, record.BatchHeader{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		FirstTimestamp: ts, MaxTimestamp: ts}, []record.Record{{Value: value}})
	if err != nil {
		t.Fatal(err)
	}
	return record.AppendKafka(nil, batch)
}
