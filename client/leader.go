package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// Bounds of one ProduceMany request the SDK sends (the broker refuses
// more than 4096 entries or 64 MiB, and by default reads requests up to 16
// MiB). A batch larger than maxManyBytes goes in a request of its own.
const (
	maxManyEntries = 1024
	maxManyBytes   = 4 << 20
)

// leaderConn sends a producer's requests for every partition one broker
// leads: the sinks hand it their requests (one batch of one partition
// each, see sink.send), and it sends what they handed in as one
// ProduceMany request (many partitions, one RPC), then answers each sink
// with its entry's result as if it had sent a Produce of its own. The
// sinks keep everything per partition (in-flight slots, sequence numbers,
// retries, deadlines, re-routing after NotLeader): a request is the same
// entry whichever way it travels.
//
// Batching across partitions is natural, like a sink's: a request leaves
// at once when fewer than the producer's max in flight (WithMaxInFlight)
// ProduceMany requests to the broker are in flight, and while they all
// are, the requests handed in gather into the next one. A request never
// carries two entries of one partition: the second waits for the next
// request, so that the broker sees a partition's batches in the order the
// sink sent them, as with one Produce per batch.
//
// A request holds its slot until the broker answers for every entry, so a
// slow entry (an acks=all wait for a lagging follower) delays the answers
// of the others in its request, as in Kafka's produce request.
//
// A broker that answers ProduceMany with Unimplemented (a version before
// it) gets one Produce per request from then on.
type leaderConn struct {
	p  *Producer
	rc sluicev1connect.RecordServiceClient

	mu       sync.Mutex
	queue    []*produceCall
	inflight int
	single   bool // the broker does not serve ProduceMany
}

// produceCall is one sink's request, waiting for its result.
type produceCall struct {
	ctx     context.Context
	req     *sluicev1.ProduceRequest
	timeout time.Duration
	done    chan produceResult // buffered: the answer never waits for the sink
	gone    bool               // the sink stopped waiting before it was sent: skip it
}

type produceResult struct {
	res *sluicev1.ProduceResponse
	err error
}

// leaderConn returns the producer's connection to the broker behind rc.
func (p *Producer) leaderConn(rc sluicev1connect.RecordServiceClient) *leaderConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	lc := p.leaders[rc]
	if lc == nil {
		lc = &leaderConn{p: p, rc: rc}
		p.leaders[rc] = lc
	}
	return lc
}

// produce sends req (a ProduceRequest of one batch) in the broker's next
// ProduceMany request, or alone when the broker does not serve those, and
// returns its result, or ctx's error once ctx ends.
func (lc *leaderConn) produce(ctx context.Context, req *sluicev1.ProduceRequest, timeout time.Duration) (*sluicev1.ProduceResponse, error) {
	lc.mu.Lock()
	if lc.single {
		lc.mu.Unlock()
		return lc.produceOne(ctx, req)
	}
	c := &produceCall{ctx: ctx, req: req, timeout: timeout, done: make(chan produceResult, 1)}
	lc.queue = append(lc.queue, c)
	lc.dispatchLocked()
	lc.mu.Unlock()
	select {
	case r := <-c.done:
		return r.res, r.err
	case <-ctx.Done():
		lc.mu.Lock()
		c.gone = true
		lc.mu.Unlock()
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return nil, connect.NewError(code, ctx.Err())
	}
}

func (lc *leaderConn) produceOne(ctx context.Context, req *sluicev1.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	res, err := lc.rc.Produce(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// dispatchLocked starts requests while slots are free and calls wait.
func (lc *leaderConn) dispatchLocked() {
	for len(lc.queue) > 0 {
		if lc.single {
			for _, c := range lc.queue {
				if !c.gone {
					go func() {
						res, err := lc.produceOne(c.ctx, c.req)
						c.done <- produceResult{res, err}
					}()
				}
			}
			lc.queue = nil
			return
		}
		if lc.inflight >= lc.p.cfg.maxInFlight {
			return
		}
		var (
			calls []*produceCall
			rest  []*produceCall
			size  int
			in    = map[sinkKey]bool{}
		)
		for _, c := range lc.queue {
			if c.gone {
				continue
			}
			k := sinkKey{c.req.GetTopic(), c.req.GetPartition()}
			n := len(c.req.GetBatches().GetData())
			if in[k] || len(calls) == maxManyEntries || (len(calls) > 0 && size+n > maxManyBytes) {
				rest = append(rest, c)
				continue
			}
			in[k] = true
			size += n
			calls = append(calls, c)
		}
		lc.queue = rest
		if len(calls) == 0 {
			return
		}
		lc.inflight++
		go lc.send(calls)
	}
}

// send makes one ProduceMany request of calls and answers each.
func (lc *leaderConn) send(calls []*produceCall) {
	var timeout time.Duration
	req := &sluicev1.ProduceManyRequest{Acks: lc.p.cfg.acks.proto(), Partitions: make([]*sluicev1.ProducePartition, len(calls)), TransactionalId: lc.p.txnID}
	for i, c := range calls {
		timeout = max(timeout, c.timeout)
		req.Partitions[i] = &sluicev1.ProducePartition{Topic: c.req.GetTopic(), Partition: c.req.GetPartition(), Batches: c.req.GetBatches(), CurrentLeaderEpoch: c.req.CurrentLeaderEpoch}
	}
	req.TimeoutMs = max(timeout.Milliseconds(), 50)
	// As a sink bounds its own attempts: the longest wait an entry asked
	// for, plus the answer's way back.
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 50*time.Millisecond)+2*time.Second)
	defer cancel()
	go func() {
		select {
		case <-lc.p.aborted:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := lc.rc.ProduceMany(ctx, connect.NewRequest(req))
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		// A broker of an older version (a rolling upgrade): nothing was
		// written; these and later requests go one by one.
		lc.p.c.logger.Debug("broker does not serve ProduceMany: producing one partition per request", "err", err)
		lc.mu.Lock()
		lc.single = true
		lc.inflight--
		lc.queue = append(calls, lc.queue...)
		lc.dispatchLocked()
		lc.mu.Unlock()
		return
	}
	err = normalize(ctx, err)
	if err == nil && len(res.Msg.GetResults()) != len(calls) {
		err = connect.NewError(connect.CodeInternal, fmt.Errorf("the broker answered %d results for %d partitions", len(res.Msg.GetResults()), len(calls)))
	}
	var throttled bool // an entry was refused for the tenant's rate (counted once per request)
	var throttle time.Duration
	for i, c := range calls {
		if err != nil {
			c.done <- produceResult{err: err}
			continue
		}
		r := res.Msg.GetResults()[i]
		if pe := r.GetError(); pe != nil {
			eerr := produceErrorOf(pe)
			if d, ok := throttleOf(eerr); ok {
				throttled, throttle = true, max(throttle, d)
			}
			c.done <- produceResult{err: quotaError(eerr)}
			continue
		}
		c.done <- produceResult{res: &sluicev1.ProduceResponse{BaseOffset: r.GetBaseOffset(), LogStartOffset: r.GetLogStartOffset(), Duplicate: r.GetDuplicate(),
			LogAppendTimeMs: r.GetLogAppendTimeMs()}}
	}
	if throttled {
		lc.p.c.throttle.add(KindProduce, throttle)
	}
	lc.mu.Lock()
	lc.inflight--
	lc.dispatchLocked()
	lc.mu.Unlock()
}

// produceErrorOf is the Connect error an entry's ProduceError carries, as
// a Produce of the entry would have returned it.
func produceErrorOf(pe *sluicev1.ProduceError) error {
	code := connect.Code(pe.GetCode())
	if code < connect.CodeCanceled || code > connect.CodeUnauthenticated {
		code = connect.CodeUnknown
	}
	ce := connect.NewError(code, errors.New(pe.GetMessage()))
	for _, d := range pe.GetDetails() {
		if ed, err := connect.NewErrorDetail(d); err == nil {
			ce.AddDetail(ed)
		}
	}
	return ce
}
