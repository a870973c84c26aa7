package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
)

// notLeader is a NotLeader refusal, as a broker answers it.
func notLeader(nl *sluicev1.NotLeader) error {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("not the leader"))
	d, err := connect.NewErrorDetail(nl)
	if err != nil {
		panic(err)
	}
	ce.AddDetail(d)
	return ce
}

// TestRoutingRecoversFromAWrongLeaderHint is issue 29's wedge: the leader
// of a partition refuses a produce once with a NotLeader hint that is not
// about the partition (the transaction-state partition's leader, another
// broker at a leader epoch two past the partition's, as a broker
// verifying a transactional produce answered before the fix); that
// broker, a follower, answers with the real leader at the partition's
// epoch. The producer must get its record written: a hint naming another
// partition is not followed, and a hint without a partition (from an
// older broker) is followed once, after which the follower's refusal at
// an older epoch makes the client refresh its metadata instead of
// ignoring it. Both with ProduceMany and, for a broker that does not
// serve it, with Produce.
func TestRoutingRecoversFromAWrongLeaderHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		hintTopic string // "": a broker that names no partition
		maxTo2    int    // produces the other brokers may receive
	}{
		{"the hint names the transaction-state partition", "txn-state-topic", 0},
		{"the hint names no partition", "", 2},
	} {
		for _, procedure := range []string{"ProduceMany", "Produce"} {
			t.Run(tc.name+"/"+procedure, func(t *testing.T) {
				t.Parallel()
				topic := freshTopic(fmt.Sprintf("routing-hint-%s-%t", procedure, tc.hintTopic == ""))
				createTopic(t, topic, 1, nil)
				pm := partitionOf(t, topic, 0)
				other := pm.replicas[0]
				if other == pm.leader {
					other = pm.replicas[1]
				}
				hint := notLeader(&sluicev1.NotLeader{TopicId: tc.hintTopic, Partition: 3,
					LeaderId: other, LeaderAddress: pm.addrs[other], LeaderEpoch: pm.epoch + 2})
				ofTopic := localcluster.Fault{Procedure: procedure, Topic: topic, Partition: localcluster.AnyPartition}
				if procedure == "Produce" {
					// Brokers that do not serve ProduceMany: the client
					// produces one partition per request.
					unimplemented := ofTopic
					unimplemented.Procedure, unimplemented.Err = "ProduceMany", connect.NewError(connect.CodeUnimplemented, errors.New("no ProduceMany"))
					addFault(t, unimplemented)
				}
				refusal := ofTopic
				refusal.Broker, refusal.Count, refusal.Err, refusal.Entries = pm.leader, 1, hint, procedure == "ProduceMany"
				refused := addFault(t, refusal)
				atLeader := ofTopic
				atLeader.Broker = pm.leader
				toLeader := addFault(t, atLeader)
				elsewhere := addFault(t, ofTopic) // the other brokers' (the leader's are taken above)

				c := newClient(t)
				p, err := c.NewProducer(t.Context(), client.WithIdempotence(false), client.WithAcks(client.AcksLeader),
					client.WithDeliveryTimeout(15*time.Second))
				require.NoError(t, err)
				defer p.Close(context.Background())
				require.NoError(t, p.ProduceSync(t.Context(), &client.Record{Topic: topic, Value: []byte("v")}),
					"produces to the leader: %d, to the others: %d", refused.Hits()+toLeader.Hits(), elsewhere.Hits())
				require.Equal(t, 1, refused.Hits())
				require.Equal(t, 2, refused.Hits()+toLeader.Hits(), "refused once, then written")
				require.LessOrEqual(t, elsewhere.Hits(), tc.maxTo2, "produces sent where the wrong hint pointed")
				require.Equal(t, 1, countIn(logBatches(t, topic, 0, 1), "v"), "written once")
			})
		}
	}
}
