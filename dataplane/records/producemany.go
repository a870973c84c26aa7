package records

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/tenants"
)

// Bounds of one ProduceMany request, refused whole beyond them.
const (
	MaxProduceManyEntries = 4096
	MaxProduceManyBytes   = 64 << 20
)

// ProduceManyRequest is a produce to several partitions at once, with
// one acks, timeout and transactional id for all.
type ProduceManyRequest struct {
	Acks            Acks
	Timeout         time.Duration
	TransactionalID string
	// VerifyOnly: the producer added the partitions of its transactional
	// batches to its transaction itself (a Kafka client below Produce
	// v12), so their leaders only check that they are in it (KIP-890
	// part 1) instead of adding them.
	VerifyOnly bool
	Entries    []ProduceEntry
	// Appended, when set, is called once every entry is in its leader's
	// log or done (refused, or failed), while acknowledgements may still
	// be awaited: the Kafka listener then takes the connection's next
	// request, whose appends come after these (partition.AfterAppend).
	// Not called when the request is refused whole.
	Appended func()
}

// ProduceEntry is one partition's part of a ProduceManyRequest: batches
// in the log's format.
type ProduceEntry struct {
	Topic              string
	Partition          int32
	CurrentLeaderEpoch *int32
	Batches            []byte
}

// EntryResult is an entry's answer: its result, or Err, the domain error
// a Produce of it alone would answer.
type EntryResult struct {
	ProduceResult
	Err error
}

// ProduceMany writes every entry as Produce would (the same resolution
// and tenant scoping, checks, leader epoch fencing and acks), each
// partition's entries on a goroutine of their own in request order, so
// that their appends, fsyncs (concurrent fsyncs of different logs, which
// the file system commits together) and acks=all waits overlap. It never
// forwards: an entry for a partition another broker leads gets the
// NotLedHereError. The request is refused whole (error) when it is
// empty, over MaxProduceManyEntries or MaxProduceManyBytes, has a bad
// acks or timeout, or is over the tenant's produce quota (charged whole,
// once: the SDK sends each entry to its leader); otherwise the results
// are in entry order. headers are the request's (Produce).
func (s *Service) ProduceMany(ctx context.Context, req ProduceManyRequest, headers Headers) ([]EntryResult, error) {
	if _, ok := tenants.PrincipalFrom(ctx); !ok {
		return nil, errNoPrincipal
	}
	entries := req.Entries
	switch {
	case len(entries) == 0:
		return nil, derr.New(derr.InvalidRequest, "partitions: must not be empty")
	case len(entries) > MaxProduceManyEntries:
		return nil, derr.New(derr.InvalidRequest, "partitions: at most %d per request; got %d", MaxProduceManyEntries, len(entries))
	}
	size := 0
	for _, e := range entries {
		size += len(e.Batches)
	}
	if size > MaxProduceManyBytes {
		return nil, derr.New(derr.RecordListTooLarge, "partitions: at most %d bytes of batches per request; got %d", MaxProduceManyBytes, size)
	}
	acks, timeout, err := produceOptions(req.Acks, req.Timeout)
	if err != nil {
		return nil, err
	}
	if err := s.d.Quotas.AdmitProduce(ctx, size); err != nil {
		return nil, err
	}
	results := make([]EntryResult, len(entries))
	now := time.Now()
	appended := appendedCounter(len(entries), req.Appended)
	var wg sync.WaitGroup
	for _, idx := range partitionsOf(entries) {
		wg.Go(func() {
			for _, i := range idx {
				var once sync.Once
				done := func() { once.Do(appended) }
				ectx := ctx
				if req.Appended != nil {
					ectx = partition.AfterAppend(ctx, done)
				}
				res, err := s.produceEntry(ectx, headers, req.TransactionalID, req.VerifyOnly, &entries[i], acks, timeout, now)
				done()
				results[i] = EntryResult{ProduceResult: res, Err: err}
			}
		})
	}
	wg.Wait()
	return results, nil
}

// appendedCounter returns the function each of n entries calls once,
// when appended or done: the last call calls f (when f is set).
func appendedCounter(n int, f func()) func() {
	var left atomic.Int64
	left.Store(int64(n))
	return func() {
		if left.Add(-1) == 0 && f != nil {
			f()
		}
	}
}

// partitionsOf groups entries by partition: the indexes of each
// partition's entries in request order, partitions in the order of their
// first entry.
func partitionsOf(entries []ProduceEntry) [][]int {
	type key struct {
		topic     string
		partition int32
	}
	at := make(map[key]int, len(entries))
	var out [][]int
	for i, e := range entries {
		k := key{e.Topic, e.Partition}
		g, ok := at[k]
		if !ok {
			g = len(out)
			at[k] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// produceEntry writes one ProduceMany entry as Produce writes a request
// with the same fields, except that it never forwards.
//
// An entry refused before it reaches the log (an unknown topic, invalid
// batches, a partition led elsewhere) is refunded the bytes ProduceMany
// charged for it; one the log refused unwritten is refunded as a Produce
// is (Quotas.RefundProduce).
func (s *Service) produceEntry(ctx context.Context, headers Headers, transactionalID string, verifyOnly bool, e *ProduceEntry, acks Acks, timeout time.Duration, now time.Time) (_ ProduceResult, err error) {
	data := e.Batches
	toLog := false // the log decides the refund from here (RefundProduce)
	defer func() {
		if err != nil && !toLog {
			s.d.Quotas.RefundUnwritten(ctx, len(data))
		}
	}()
	t, pm, _, err := s.resolve(ctx, e.Topic, e.Partition)
	if err != nil {
		return ProduceResult{}, err
	}
	if len(data) == 0 {
		return ProduceResult{}, derr.New(derr.InvalidRequest, "batches: must not be empty")
	}
	batches, err := splitBatches(data, t.Config.MaxMessageBytes)
	if err != nil {
		return ProduceResult{}, err
	}
	txn, err := transactionalBatches(batches, transactionalID)
	if err != nil {
		return ProduceResult{}, err
	}
	if txn != nil {
		txn.verifyOnly = verifyOnly
	}
	p, err := s.local(pm, t)
	if err != nil {
		return ProduceResult{}, err
	}
	toLog = true
	res, err := s.produceOn(ctx, t, p, batches, acks, timeout, e.CurrentLeaderEpoch, s.verifier(txn, headers, t, pm.Partition))
	s.d.Quotas.RefundProduce(ctx, len(batches), len(data), res.Duplicate, err)
	return res, err
}
