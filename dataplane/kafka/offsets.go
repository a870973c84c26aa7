package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/tenants"
)

// The special timestamps of ListOffsets.
const (
	latestTimestamp        = -1
	earliestTimestamp      = -2
	maxTimestamp           = -3
	earliestLocalTimestamp = -4
)

func (c *conn) listOffsets(ctx context.Context, req *kmsg.ListOffsetsRequest) *kmsg.ListOffsetsResponse {
	res := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	iso := records.ReadUncommitted
	if req.IsolationLevel == 1 {
		iso = records.ReadCommitted
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewListOffsetsResponseTopic()
		tr.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			pr := kmsg.NewListOffsetsResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.Timestamp, pr.Offset, pr.LeaderEpoch = -1, -1, -1
			lreq := records.ListOffsetsRequest{Topic: rt.Topic, Partition: rp.Partition, Isolation: iso}
			if !c.sess.p.Has(tenants.ScopeConsume) {
				pr.ErrorCode = kerr.TopicAuthorizationFailed.Code
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			switch ts := rp.Timestamp; {
			case ts == latestTimestamp:
				lreq.Spec = records.Latest
			case ts == earliestTimestamp || ts == earliestLocalTimestamp:
				lreq.Spec = records.Earliest
			case ts == maxTimestamp && req.Version >= 7:
				lreq.Spec = records.MaxTimestamp
			case ts >= 0:
				lreq.Spec, lreq.TimestampMs = records.Timestamp, ts
			default:
				// Max timestamp below v7 (KIP-734 gave it v7), and
				// the tiered specs past -4 (v9+, which ApiVersions
				// does not advertise), as Kafka answers them.
				pr.ErrorCode = kerr.UnsupportedVersion.Code
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			r, err := c.s.d.Records.ListOffsets(ctx, lreq)
			if err != nil {
				pr.ErrorCode = errorCode(err, atPartition)
			} else {
				pr.Offset, pr.Timestamp = r.Offset, r.Timestamp
				if rp.Timestamp == earliestLocalTimestamp {
					pr.Offset = r.LocalLogStartOffset
				}
				if v := c.s.d.View(); v != nil {
					if t, ok := v.Topic(c.sess.tenantID, rt.Topic); ok && int(rp.Partition) < len(t.Partitions) {
						pr.LeaderEpoch = t.Partitions[rp.Partition].LeaderEpoch
					}
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		res.Topics = append(res.Topics, tr)
	}
	return res
}

func (c *conn) initProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	res := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	res.ProducerID, res.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		c.initTransactionalProducer(ctx, req, res)
		return res
	}
	if !c.sess.p.Has(tenants.ScopeProduce) {
		// Kafka's answer to a producer without idempotent-write rights.
		res.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return res
	}
	id, epoch, err := c.s.d.Records.InitProducerID(ctx, records.InitProducerIDRequest{})
	if err != nil {
		res.ErrorCode = errorCode(err, atRequest)
		if wait, ok := retryAfter(err); ok {
			res.ThrottleMillis = int32(min(wait, time.Minute).Milliseconds())
		}
		return res
	}
	res.ProducerID, res.ProducerEpoch = id, epoch
	return res
}

func (c *conn) offsetForLeaderEpoch(ctx context.Context, req *kmsg.OffsetForLeaderEpochRequest) *kmsg.OffsetForLeaderEpochResponse {
	res := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		tr := kmsg.NewOffsetForLeaderEpochResponseTopic()
		tr.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			pr := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.LeaderEpoch, pr.EndOffset = -1, -1
			if req.ReplicaID >= 0 || !c.sess.p.Has(tenants.ScopeConsume) {
				pr.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			cur := rp.CurrentLeaderEpoch
			e, end, err := c.s.d.Records.EndOffsetForEpoch(ctx, rt.Topic, rp.Partition, &cur, rp.LeaderEpoch)
			if err != nil {
				pr.ErrorCode = errorCode(err, atPartition)
			} else {
				pr.LeaderEpoch, pr.EndOffset = e, end
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		res.Topics = append(res.Topics, tr)
	}
	return res
}
