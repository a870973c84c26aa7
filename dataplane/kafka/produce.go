package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// produce writes a Produce request's partitions with the record
// service's ProduceMany (each partition on its own goroutine, in request
// order), after converting their batches from Kafka's RecordBatch v2 in
// place (record.FromKafka). A tenant over its produce quota is held, the
// connection muted, until the quota admits the request or its timeout
// passes: Kafka clients are slowed by a quota, not refused.
func (c *conn) produce(ctx context.Context, req *kmsg.ProduceRequest) *kmsg.ProduceResponse {
	// A produce refused before its appends (bad batches, a scope, acks,
	// the whole request) releases the connection's next request too: it
	// appends nothing, so the order holds (ProduceManyRequest.Appended
	// releases the others once appended).
	if release := releaseOf(ctx); release != nil {
		defer release()
	}
	res := req.ResponseKind().(*kmsg.ProduceResponse)
	type slot struct{ t, p, entry int } // a response partition and its entry (-1: none)
	var entries []records.ProduceEntry
	var slots []slot
	for ti, rt := range req.Topics {
		tr := kmsg.NewProduceResponseTopic()
		tr.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.BaseOffset, pr.LogAppendTime, pr.LogStartOffset = -1, -1, -1
			entry := -1
			if _, err := record.FromKafka(rp.Records); err != nil {
				pr.ErrorCode = kerr.CorruptMessage.Code
				if errors.Is(err, record.ErrUnsupportedMagic) {
					pr.ErrorCode = kerr.UnsupportedForMessageFormat.Code
				}
				pr.ErrorMessage = ptr(err.Error())
			} else {
				entry = len(entries)
				entries = append(entries, records.ProduceEntry{Topic: rt.Topic, Partition: rp.Partition, Batches: rp.Records})
			}
			slots = append(slots, slot{ti, len(tr.Partitions), entry})
			tr.Partitions = append(tr.Partitions, pr)
		}
		res.Topics = append(res.Topics, tr)
	}
	if len(entries) == 0 {
		return res
	}
	if err := c.sess.p.Require(tenants.ScopeProduce); err != nil {
		for _, s := range slots {
			pr := &res.Topics[s.t].Partitions[s.p]
			pr.ErrorCode, pr.ErrorMessage = kerr.TopicAuthorizationFailed.Code, ptr(err.Error())
		}
		return res
	}
	var acks records.Acks
	switch req.Acks {
	case 0:
		acks = records.AcksNone
	case 1:
		acks = records.AcksLeader
	case -1:
		acks = records.AcksAll
	default:
		for _, s := range slots {
			res.Topics[s.t].Partitions[s.p].ErrorCode = kerr.InvalidRequiredAcks.Code
		}
		return res
	}
	timeout := time.Duration(max(req.TimeoutMillis, 0)) * time.Millisecond
	// The connection's next produce may start once these are appended.
	mreq := records.ProduceManyRequest{Acks: acks, Timeout: timeout, Entries: entries, Appended: releaseOf(ctx)}
	if req.TransactionID != nil {
		// Below v12 the client added the partitions itself
		// (AddPartitionsToTxn), so their leaders only verify; from v12
		// the produce adds them (KIP-890 part 2; see Txns).
		mreq.TransactionalID, mreq.VerifyOnly = *req.TransactionID, req.Version < 12
	}
	deadline := time.Now().Add(max(timeout, time.Second))
	var results []records.EntryResult
	var err error
	for {
		results, err = c.s.d.Records.ProduceMany(ctx, mreq, c.sess.headers)
		wait, throttled := retryAfter(err)
		if !throttled || time.Now().Add(wait).After(deadline) {
			if throttled {
				err = derr.New(derr.RequestTimedOut, "over the tenant's produce quota for the request's whole timeout: nothing written")
			}
			break
		}
		c.s.metrics.throttled(c.sess.tenantID, wait)
		if serr := clock.Sleep(ctx, wait); serr != nil {
			err = serr
			break
		}
	}
	v := c.s.d.View()
	leaders := map[int32]bool{}
	for _, s := range slots {
		if s.entry < 0 {
			continue
		}
		pr := &res.Topics[s.t].Partitions[s.p]
		eerr := err
		var r records.EntryResult
		if err == nil {
			r = results[s.entry]
			eerr = r.Err
		}
		switch {
		case eerr == nil:
			pr.BaseOffset, pr.LogAppendTime, pr.LogStartOffset = r.BaseOffset, r.LogAppendTime, r.LogStartOffset
		case errors.Is(eerr, derr.DuplicateSequenceNumber):
			// Written before, too long ago to know its offset: a
			// success for the producer, as Kafka answers it.
			pr.BaseOffset = -1
		default:
			pr.ErrorCode = errorCode(eerr, atPartition)
			if pr.ErrorCode == kerr.TransactionAbortable.Code && req.Version < 11 {
				pr.ErrorCode = kerr.InvalidProducerEpoch.Code // see txnCode
			}
			pr.ErrorMessage = errorMessage(eerr)
			if nl := notLeader(eerr); nl != nil && req.Version >= 10 {
				pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = nl.Leader, nl.Epoch
				if nl.Leader >= 0 {
					leaders[nl.Leader] = true
				}
			}
		}
	}
	if len(leaders) > 0 {
		for _, e := range endpoints(v, leaders) {
			b := kmsg.NewProduceResponseBroker()
			b.NodeID, b.Host, b.Port, b.Rack = e.id, e.host, e.port, e.rack
			res.Brokers = append(res.Brokers, b)
		}
	}
	return res
}

// notLeader is the leader hint in err's chain, nil without one.
func notLeader(err error) *derr.NotLeaderError {
	var nl *derr.NotLeaderError
	if errors.As(err, &nl) {
		return nl
	}
	return nil
}
