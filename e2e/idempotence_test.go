package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// idemBatch is an idempotent batch of n records from producer (pid, epoch)
// starting at sequence seq.
func idemBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: fmt.Appendf(nil, "%d/%d/%d", epoch, seq, i)}
	}
	b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs)
	require.NoError(t, err)
	return b
}

func producerReason(err error) sluicev1.ProducerError_Reason {
	pe, _ := client.ErrorDetail[*sluicev1.ProducerError](err)
	return pe.GetReason()
}

// TestClusterIdempotenceSurvivesFailoverAndRestart drives the leader's producer
// state with hand-made batches: a retry is answered with the original
// offset by a new leader after a SIGKILL failover and after every broker
// was SIGKILLed and restarted (state rebuilt from the log); a gap is
// refused; an older epoch is fenced.
func TestClusterIdempotenceSurvivesFailoverAndRestart(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t)})
	tc := c.NewClient(t, "acme", "idem", 1, 2)
	ctx := t.Context()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	tok, err := sluicev1connect.NewAuthServiceClient(hc, c.ControlPlane()).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: tc.APIKey}))
	require.NoError(t, err)
	auth := connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken()))
	broker := func(id int32) sluicev1connect.RecordServiceClient {
		return sluicev1connect.NewRecordServiceClient(hc, "http://"+c.Broker(id).Advertised(), auth)
	}
	leader := func() int32 {
		var l int32
		testenv.Wait(t, 30*time.Second, "a leader", func() error {
			md := tc.NewestMetadata(ctx)
			if l = md[0].Leader; l < 0 {
				return errors.New("offline")
			}
			return nil
		})
		return l
	}
	// produce sends one batch to the current leader (any broker forwards),
	// retrying while leadership moves.
	produce := func(batch []byte) (*sluicev1.ProduceResponse, error) {
		var res *connect.Response[sluicev1.ProduceResponse]
		var err error
		deadline := time.Now().Add(30 * time.Second)
		for {
			res, err = broker(leader()).Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{
				Topic: "idem", Acks: sluicev1.Acks_ACKS_ALL,
				Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: batch}},
			}))
			code := connect.CodeOf(err)
			if err == nil || time.Now().After(deadline) || (code != connect.CodeUnavailable && code != connect.CodeFailedPrecondition) || producerReason(err) != 0 {
				break
			}
			time.Sleep(100 * time.Millisecond) // backoff: the partition is moving
		}
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}

	init, err := broker(leader()).InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
	require.NoError(t, err)
	pid := init.Msg.GetProducerId()
	other, err := broker(leader()).InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
	require.NoError(t, err)
	require.NotEqual(t, pid, other.Msg.GetProducerId(), "producer ids are never handed out twice")

	b0, b3, b5 := idemBatch(t, pid, 0, 0, 3), idemBatch(t, pid, 0, 3, 2), idemBatch(t, pid, 0, 5, 4)
	for i, b := range [][]byte{b0, b3, b5} {
		res, err := produce(b)
		require.NoError(t, err)
		require.False(t, res.GetDuplicate())
		require.Equal(t, []int64{0, 3, 5}[i], res.GetBaseOffset())
	}
	dup, err := produce(b3)
	require.NoError(t, err)
	require.True(t, dup.GetDuplicate(), "a retry is answered, not written")
	require.Equal(t, int64(3), dup.GetBaseOffset())

	old := leader()
	c.Kill(old)
	testenv.Wait(t, 30*time.Second, "a new leader", func() error {
		if l := tc.NewestMetadata(ctx)[0].Leader; l == old || l < 0 {
			return fmt.Errorf("leader %d", l)
		}
		return nil
	})
	dup, err = produce(b5)
	require.NoError(t, err)
	require.True(t, dup.GetDuplicate(), "the new leader knows the batch from replication")
	require.Equal(t, int64(5), dup.GetBaseOffset())
	res, err := produce(idemBatch(t, pid, 0, 9, 1))
	require.NoError(t, err)
	require.Equal(t, int64(9), res.GetBaseOffset())

	start := time.Now()
	_, err = produce(idemBatch(t, pid, 0, 11, 1))
	require.Equal(t, sluicev1.ProducerError_REASON_OUT_OF_ORDER_SEQUENCE, producerReason(err), "a gap is refused: %v", err)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "after waiting for the missing batch")

	e1 := idemBatch(t, pid, 1, 0, 2)
	res, err = produce(e1)
	require.NoError(t, err, "a new epoch starts at sequence 0")
	require.Equal(t, int64(10), res.GetBaseOffset())
	_, err = produce(idemBatch(t, pid, 0, 10, 1))
	require.Equal(t, sluicev1.ProducerError_REASON_PRODUCER_FENCED, producerReason(err), "the old epoch is fenced: %v", err)

	// Every broker SIGKILLed and restarted: the state is rebuilt from the
	// log (and snapshots) on each.
	c.Restart(old, false)
	c.WaitLive(c.BrokerIDs()...)
	testcluster.WaitQuiesced(t, tc, []int32{0}, 30*time.Second)
	for _, id := range c.BrokerIDs() {
		c.Kill(id)
	}
	for _, id := range c.BrokerIDs() {
		c.Restart(id, false)
	}
	c.WaitLive(c.BrokerIDs()...)
	dup, err = produce(e1)
	require.NoError(t, err)
	require.True(t, dup.GetDuplicate(), "after a restart of every broker")
	require.Equal(t, int64(10), dup.GetBaseOffset())
	res, err = produce(idemBatch(t, pid, 1, 2, 1))
	require.NoError(t, err)
	require.Equal(t, int64(12), res.GetBaseOffset())
}
