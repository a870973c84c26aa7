package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// elect moves the leadership of topic's partition to broker to at the
// next leader epoch, leaving the old leader out of the ISR, and makes to
// the preferred replica: what the controller writes when it fails the
// partition over from a broker it counts dead (the cluster is shared, so
// the test cannot stop a broker's heartbeats; and the paused broker stays
// a follower that catches up, which as the preferred replica would take
// the leadership back).
func elect(t *testing.T, topicID string, partition, to int32) {
	t.Helper()
	st := cluster.ControlPlane().Store()
	testenv.Wait(t, 10*time.Second, fmt.Sprintf("broker %d elected", to), func() error {
		ps, err := st.ListPartitions(t.Context(), topicID)
		if err != nil {
			return testenv.Permanent(err)
		}
		p := ps[partition]
		if !slices.Contains(p.ISR, to) {
			return testenv.Permanent(fmt.Errorf("broker %d is not in the ISR %v", to, p.ISR))
		}
		next := p
		next.Leader, next.LeaderEpoch, next.PartitionEpoch = to, p.LeaderEpoch+1, p.PartitionEpoch+1
		next.ISR = slices.DeleteFunc(slices.Clone(p.ISR), func(id int32) bool { return id == p.Leader })
		next.Replicas = append([]int32{to}, slices.DeleteFunc(slices.Clone(p.Replicas), func(id int32) bool { return id == to })...)
		err = st.UpdatePartition(t.Context(), next, p.PartitionEpoch)
		if errors.Is(err, store.ErrConflict) {
			return err // the leader changed its ISR meanwhile: read again
		}
		if err != nil {
			return testenv.Permanent(err)
		}
		return nil
	})
}

// produceAsync produces one record and returns the channel its callback's
// error arrives on, with the record.
func produceAsync(p *client.Producer, topic, v string) (*client.Record, <-chan error) {
	r := &client.Record{Topic: topic, Value: []byte(v)}
	done := make(chan error, 1)
	p.Produce(context.Background(), r, func(_ *client.Record, err error) { done <- err })
	return r, done
}

// TestRoutingLeavesAStoppedLeader is issue 29 item 7's stall: the leader of
// a partition stops without closing its connections (SIGSTOP) after its
// followers have the producer's batch; the controller elects another
// broker at a higher leader epoch. The producer must write the record
// through the new leader once the metadata names it, not wait for the old
// leader's answer until the request times out (30 s) or HTTP/2's health
// check drops the connection (15 s): in a fault run, producers made no
// progress on a partition for as long as a paused broker stayed stopped
// (20 s for a 20 s SIGSTOP), though a new leader had been elected 3 s
// after the stop. The retry keeps the batch's producer epoch and sequence,
// so the new leader answers it with the offset the old one wrote it at:
// written once.
//
// The stop is the cluster's faults on the leader's produces for the
// topic: the first is performed (and replicated: acks=all) and its answer
// held, later ones held unanswered; the election is elect's.
func TestRoutingLeavesAStoppedLeader(t *testing.T) {
	t.Parallel()
	topic := freshTopic("routing-stopped-leader")
	createTopic(t, topic, 1, nil)
	pm := partitionOf(t, topic, 0)
	next := pm.replicas[0]
	if next == pm.leader {
		next = pm.replicas[1]
	}
	cl := newClient(t)
	p, err := cl.NewProducer(t.Context(), client.WithDeliveryTimeout(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	require.NoError(t, p.ProduceSync(t.Context(), &client.Record{Topic: topic, Value: []byte("warm")}))

	atLeader := localcluster.Fault{Broker: pm.leader, Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition}
	taken := atLeader
	taken.Count, taken.AnswerDelay = 1, time.Hour
	took := addFault(t, taken)
	stuck := atLeader
	stuck.Hook = make(gate).hold // never opened: held until the caller gives up
	stopped := addFault(t, stuck)
	atNext := atLeader
	atNext.Broker = next
	toNext := addFault(t, atNext)

	r, done := produceAsync(p, topic, "v")
	// The batch is below the stopped leader's high watermark: every
	// follower has it.
	logBatches(t, topic, 0, 2)
	require.Equal(t, 1, took.Hits())
	moved := time.Now()
	elect(t, pm.topicID, 0, next)

	// The metadata is looked up a second after the attempt was sent, and
	// again every second. 10 s leaves room for a loaded machine, and is a
	// third of the request timeout the producer would otherwise wait for.
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("record not acknowledged 10 s after the new leader was elected (produces to the stopped leader: %d, to the new one: %d)",
			took.Hits()+stopped.Hits(), toNext.Hits())
	}
	t.Logf("acknowledged %s after the leadership moved", time.Since(moved).Round(time.Millisecond))
	require.Equal(t, int64(1), r.Offset, "the offset the stopped leader wrote it at")
	logged := dataBatches(logBatches(t, topic, 0, 2))
	require.Equal(t, 1, countIn(logged, "warm"), "%v", logged)
	require.Equal(t, 1, countIn(logged, "v"), "written once: %v", logged)
	require.Len(t, logged, 2, "%v", logged)
	require.Positive(t, toNext.Hits(), "the new leader got the retry")
}

// TestRoutingWaitsForASlowLeader: an attempt is only abandoned for a newer
// leader epoch. A leader that takes 2.5 s to answer, and is still the
// leader, gets one attempt, which succeeds, however often the producer
// looked at the metadata meanwhile.
func TestRoutingWaitsForASlowLeader(t *testing.T) {
	t.Parallel()
	topic := freshTopic("routing-slow-leader")
	createTopic(t, topic, 1, nil)
	pm := partitionOf(t, topic, 0)
	atLeader := localcluster.Fault{Broker: pm.leader, Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition}
	slow := atLeader
	slow.Count, slow.AnswerDelay = 1, 2500*time.Millisecond
	slowed := addFault(t, slow)
	again := addFault(t, atLeader)
	elsewhere := addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition})
	cl := newClient(t)
	p, err := cl.NewProducer(t.Context(), client.WithDeliveryTimeout(time.Minute))
	require.NoError(t, err)
	defer p.Close(context.Background())
	require.NoError(t, p.ProduceSync(t.Context(), &client.Record{Topic: topic, Value: []byte("slow")}))
	require.Equal(t, 1, slowed.Hits()+again.Hits(), "one attempt")
	require.Zero(t, elsewhere.Hits())
	logged := dataBatches(logBatches(t, topic, 0, 1))
	require.Len(t, logged, 1, "%v", logged)
	require.Equal(t, []string{"slow"}, logged[0].values)
}
