package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// fetchPart is one partition of a Fetch request being served.
type fetchPart struct {
	topic *kmsg.FetchResponseTopic
	idx   int // in topic.Partitions
	name  string
	req   kmsg.FetchRequestTopicPartition
	done  bool // answered (data or an error): not read again
}

// fetch serves a Fetch request without fetch sessions (KIP-227: a
// session id of 0 in every answer, so clients send full requests): it
// reads every partition without waiting and, while that found fewer
// than min_bytes and max_wait has not passed, waits for any of them to
// get records, then reads again. Partitions are answered unfiltered
// (transaction markers and aborted batches kept, with the aborted
// transactions for read_committed), as Kafka clients filter themselves.
// A tenant over its fetch quota gets an empty answer with the throttle
// time, and the connection is muted that long (KIP-219).
func (c *conn) fetch(ctx context.Context, req *kmsg.FetchRequest) (*kmsg.FetchResponse, time.Duration) {
	res := req.ResponseKind().(*kmsg.FetchResponse)
	if req.SessionID != 0 || req.SessionEpoch > 0 {
		// An incremental fetch of a session this broker never gave.
		res.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return res, 0
	}
	v := c.s.d.View()
	p, _ := tenants.PrincipalFrom(ctx)
	var parts []*fetchPart
	for _, rt := range req.Topics {
		tr := kmsg.NewFetchResponseTopic()
		tr.Topic, tr.TopicID = rt.Topic, rt.TopicID
		known := true
		if req.Version >= 13 {
			_, known = byTopicID(v, p.TenantID, rt.TopicID)
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.NewFetchResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.HighWatermark, pr.LastStableOffset, pr.LogStartOffset = -1, -1, -1
			pr.RecordBatches = []byte{} // empty, not null: librdkafka refuses a null record set
			if !known {
				pr.ErrorCode = kerr.UnknownTopicID.Code
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		res.Topics = append(res.Topics, tr)
	}
	for ti, rt := range req.Topics {
		tr := &res.Topics[ti]
		for pi, rp := range rt.Partitions {
			fp := &fetchPart{topic: tr, idx: pi, name: tr.Topic, req: rp, done: tr.Partitions[pi].ErrorCode != 0}
			if req.Version >= 13 && !fp.done {
				t, _ := byTopicID(v, p.TenantID, rt.TopicID)
				fp.name = t.Name
			}
			parts = append(parts, fp)
		}
	}
	if !p.Has(tenants.ScopeConsume) {
		for _, fp := range parts {
			fp.topic.Partitions[fp.idx].ErrorCode = kerr.TopicAuthorizationFailed.Code
		}
		return res, 0
	}
	iso := records.ReadUncommitted
	if req.IsolationLevel == 1 {
		iso = records.ReadCommitted
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 || req.Version < 3 {
		maxBytes = 50 << 20
	}
	wait := time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond
	deadline := time.Now().Add(wait)
	got := 0
	for {
		n, throttle := c.readParts(ctx, parts, iso, maxBytes-got, got == 0)
		got += n
		if throttle > 0 {
			res.ThrottleMillis = int32(throttle.Milliseconds())
			return res, throttle
		}
		left := time.Until(deadline)
		if got >= max(int(req.MinBytes), 1) || left <= 0 || allDone(parts) || ctx.Err() != nil {
			break
		}
		got += c.awaitData(ctx, parts, iso, maxBytes-got, left)
		if got >= max(int(req.MinBytes), 1) || time.Until(deadline) <= 0 {
			// One last read: what arrived as the wait ended.
			n, _ := c.readParts(ctx, parts, iso, maxBytes-got, got == 0)
			got += n
			break
		}
	}
	c.fillLeaders(v, req.Version, res)
	return res, 0
}

func allDone(parts []*fetchPart) bool {
	for _, fp := range parts {
		if !fp.done {
			return false
		}
	}
	return true
}

// readParts reads the partitions not answered yet, without waiting, up
// to budget bytes in all (the first partition with data gets at least
// one batch when first is set: KIP-74); it returns the bytes read, or
// the throttle time of a fetch quota refusal.
func (c *conn) readParts(ctx context.Context, parts []*fetchPart, iso records.IsolationLevel, budget int, first bool) (int, time.Duration) {
	n := 0
	for _, fp := range parts {
		if fp.done {
			continue
		}
		limit := int(fp.req.PartitionMaxBytes)
		if limit <= 0 {
			limit = 1 << 20
		}
		if !first || n > 0 {
			if budget-n <= 0 {
				break
			}
			limit = min(limit, budget-n)
		}
		r, err := c.s.d.Records.Fetch(ctx, c.fetchRequest(fp, iso, limit, 0))
		if wait, ok := retryAfter(err); ok {
			return n, wait
		}
		n += c.apply(fp, iso, r, err)
	}
	return n, 0
}

// apply puts a partition's read (r, err) in the answer and returns the
// bytes it added. A read with records is answered whole, even past the
// request's byte budget (its first batch may be larger than asked for):
// what a fetch read is charged to the tenant's quota and metered, so it
// is never dropped.
func (c *conn) apply(fp *fetchPart, iso records.IsolationLevel, r records.FetchResult, err error) int {
	pr := &fp.topic.Partitions[fp.idx]
	if err != nil {
		pr.ErrorCode = errorCode(err, atPartition)
		fp.done = true
		return 0
	}
	pr.HighWatermark, pr.LastStableOffset, pr.LogStartOffset = r.HW, r.LSO, r.LogStartOffset
	if len(r.Data) == 0 {
		return 0
	}
	pr.RecordBatches = record.AppendKafka(nil, r.Data)
	for _, a := range r.Aborted {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
		pr.AbortedTransactions = append(pr.AbortedTransactions, at)
	}
	if iso == records.ReadCommitted && pr.AbortedTransactions == nil {
		pr.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
	}
	fp.done = true
	return len(r.Data)
}

func (c *conn) fetchRequest(fp *fetchPart, iso records.IsolationLevel, maxBytes int, wait time.Duration) records.FetchRequest {
	r := records.FetchRequest{Topic: fp.name, Partition: fp.req.Partition, Offset: fp.req.FetchOffset, MaxBytes: maxBytes, MaxWait: wait,
		Isolation: iso, Unfiltered: true}
	if fp.req.CurrentLeaderEpoch >= 0 {
		e := fp.req.CurrentLeaderEpoch
		r.CurrentLeaderEpoch = &e
	}
	return r
}

// awaitData long-polls every partition not answered yet (each up to its
// share of budget bytes), until one of them returns records or wait
// passes, and answers what the polls returned (a read is charged and
// metered, so it is answered); it returns the bytes added. A poll ended
// by another's records, or by the wait, answers nothing.
func (c *conn) awaitData(ctx context.Context, parts []*fetchPart, iso records.IsolationLevel, budget int, wait time.Duration) int {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	type polled struct {
		fp  *fetchPart
		r   records.FetchResult
		err error
	}
	var mu sync.Mutex
	var got []polled
	var wg sync.WaitGroup
	for _, fp := range parts {
		if fp.done {
			continue
		}
		limit := int(fp.req.PartitionMaxBytes)
		if limit <= 0 {
			limit = 1 << 20
		}
		limit = max(1, min(limit, budget))
		wg.Go(func() {
			r, err := c.s.d.Records.Fetch(pctx, c.fetchRequest(fp, iso, limit, wait))
			if pctx.Err() != nil && len(r.Data) == 0 {
				return // ended by another poll or by the wait: nothing read
			}
			if _, throttled := retryAfter(err); throttled {
				return
			}
			if err != nil || len(r.Data) > 0 {
				mu.Lock()
				got = append(got, polled{fp, r, err})
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	n := 0
	for _, p := range got {
		n += c.apply(p.fp, iso, p.r, p.err)
	}
	return n
}

// fillLeaders adds the current leader of partitions answered
// NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH, and its endpoint
// (KIP-951, v12 and v16).
func (c *conn) fillLeaders(v *cluster.View, version int16, res *kmsg.FetchResponse) {
	if version < 12 {
		return
	}
	p := map[int32]bool{}
	for ti := range res.Topics {
		tr := &res.Topics[ti]
		var t *cluster.Topic
		var ok bool
		for pi := range tr.Partitions {
			pr := &tr.Partitions[pi]
			if pr.ErrorCode != kerr.NotLeaderForPartition.Code && pr.ErrorCode != kerr.FencedLeaderEpoch.Code {
				continue
			}
			if t == nil {
				t, ok = c.topicOf(v, tr)
			}
			if !ok || int(pr.Partition) >= len(t.Partitions) {
				continue
			}
			pm := t.Partitions[pr.Partition]
			pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = leaderOf(v, pm), pm.LeaderEpoch
			if l := pr.CurrentLeader.LeaderID; l >= 0 {
				p[l] = true
			}
		}
	}
	if version < 16 || len(p) == 0 {
		return
	}
	for _, e := range endpoints(v, p) {
		b := kmsg.NewFetchResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = e.id, e.host, e.port, e.rack
		res.Brokers = append(res.Brokers, b)
	}
}

// topicOf is the caller's topic a response topic names.
func (c *conn) topicOf(v *cluster.View, tr *kmsg.FetchResponseTopic) (*cluster.Topic, bool) {
	if tr.TopicID != [16]byte{} {
		return byTopicID(v, c.sess.tenantID, tr.TopicID)
	}
	return v.Topic(c.sess.tenantID, tr.Topic)
}
