package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// quotaScript makes the package's cluster refuse calls as a broker over
// a tenant's quota does: a rate refusal (ResourceExhausted with RetryInfo
// and QuotaFailure) or a limit refusal (QuotaFailure alone), as many
// times as a test scripts, and notes when each call arrived. Its faults
// (a Hook per procedure) name its own topic where the call names one,
// and its groups' names start with the topic's; GetMetadata and
// InitProducerId name neither, so the tests that script those do not
// run in parallel.
type quotaScript struct {
	topic string

	mu sync.Mutex
	// Scripted refusals per procedure ("ProduceMany", "Fetch", ...), each
	// used once, in order.
	refuse map[string][]error
	calls  map[string][]fakeCall
	// batches is every ProduceMany entry's batch, as received.
	batches [][]byte
	// gate, when set, holds every ProduceMany call until the test answers
	// it (release).
	gate *produceGate
}

// produceGate holds ProduceMany calls and notes how many were held, that
// one included, when each arrived: the client's requests in flight.
type produceGate struct {
	mu       sync.Mutex
	held     []chan error
	heldSeqs []int32 // the first batch sequence of each held call
	arrivals []int
	open     bool // hold nothing any more
}

func (g *produceGate) hold(ctx context.Context, seq int32) error {
	ch := make(chan error, 1)
	g.mu.Lock()
	if g.open {
		g.mu.Unlock()
		return nil
	}
	g.held = append(g.held, ch)
	g.heldSeqs = append(g.heldSeqs, seq)
	g.arrivals = append(g.arrivals, len(g.held))
	g.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitHeld waits until at least n calls are held and returns how many
// arrived so far.
func (g *produceGate) waitHeld(t *testing.T, n int) int {
	t.Helper()
	var arrived int
	testenv.Wait(t, 10*time.Second, fmt.Sprintf("%d produce calls held", n), func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.held) < n {
			return fmt.Errorf("%d held", len(g.held))
		}
		arrived = len(g.arrivals)
		return nil
	})
	return arrived
}

// serveUntil reports whether a call of batch sequence seq is held, and
// serves every held call when none is.
func (g *produceGate) serveUntil(seq int32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.Contains(g.heldSeqs, seq) {
		return true
	}
	g.releaseLocked(nil)
	return false
}

// openUp answers every held call and holds no more.
func (g *produceGate) openUp() {
	g.release(nil)
	g.mu.Lock()
	g.open = true
	g.mu.Unlock()
}

// release answers every held call: the first with first (nil: served),
// the others served. It returns the first's batch sequence.
func (g *produceGate) release(first error) int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.releaseLocked(first)
}

func (g *produceGate) releaseLocked(first error) int32 {
	seq := int32(-1)
	for i, ch := range g.held {
		if i == 0 {
			ch <- first
			seq = g.heldSeqs[0]
			continue
		}
		ch <- nil
	}
	g.held, g.heldSeqs = nil, nil
	return seq
}

// fakeCall is when a call arrived and the delay its refusal asked for
// (0: none).
type fakeCall struct {
	at    time.Time
	delay time.Duration
}

func (f *quotaScript) callLocked(proc string) error {
	if f.calls == nil {
		f.calls = map[string][]fakeCall{}
	}
	var err error
	if errs := f.refuse[proc]; len(errs) > 0 {
		err, f.refuse[proc] = errs[0], errs[1:]
	}
	f.calls[proc] = append(f.calls[proc], fakeCall{at: time.Now(), delay: delayOf(err)})
	return err
}

// delayOf is the RetryInfo delay of a refusal.
func delayOf(err error) time.Duration {
	if ri, ok := client.ErrorDetail[*errdetails.RetryInfo](err); ok {
		return ri.GetRetryDelay().AsDuration()
	}
	return 0
}

func (f *quotaScript) script(proc string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse == nil {
		f.refuse = map[string][]error{}
	}
	f.refuse[proc] = append(f.refuse[proc], errs...)
}

func (f *quotaScript) callsOf(proc string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls[proc]...)
}

// hook is the Fault.Hook of proc: it answers the next scripted refusal.
func (f *quotaScript) hook(proc string) func(context.Context, localcluster.Call) error {
	return func(ctx context.Context, c localcluster.Call) error {
		if hb, ok := c.Request.(*sluicev1.GroupHeartbeatRequest); ok && !strings.HasPrefix(hb.GetGroup(), f.topic) {
			return nil // another test's group
		}
		many, _ := c.Request.(*sluicev1.ProduceManyRequest)
		if many != nil && f.gate != nil {
			seq := int32(-1)
			if es := many.GetPartitions(); len(es) > 0 {
				if b, _, err := record.ReadBatch(es[0].GetBatches().GetData()); err == nil {
					seq = b.Header().BaseSequence
				}
			}
			if err := f.gate.hold(ctx, seq); err != nil {
				return err
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range many.GetPartitions() {
			f.batches = append(f.batches, bytes.Clone(e.GetBatches().GetData()))
		}
		return f.callLocked(proc)
	}
}

// newQuotaScript creates topic (one partition) and scripts its calls.
// With entries, ProduceMany refusals refuse the topic's entry in the
// call's results, not the call.
func newQuotaScript(t *testing.T, topic string, entries bool) *quotaScript {
	t.Helper()
	createTopic(t, topic, 1, nil)
	f := &quotaScript{topic: topic}
	for _, proc := range []string{"ProduceMany", "ListOffsets", "Fetch"} {
		addFault(t, localcluster.Fault{Procedure: proc, Topic: topic, Partition: localcluster.AnyPartition, Hook: f.hook(proc), Entries: entries && proc == "ProduceMany"})
	}
	for _, proc := range []string{"InitProducerId", "GroupHeartbeat"} {
		addFault(t, localcluster.Fault{Procedure: proc, Hook: f.hook(proc)})
	}
	everywhere(t, localcluster.Fault{Procedure: "GetMetadata", Hook: f.hook("GetMetadata")})
	return f
}

// rateRefusal is a broker's refusal for a rate quota: ResourceExhausted
// with RetryInfo and QuotaFailure, as HELPERS.md's contract has it.
func rateRefusal(delay time.Duration) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, errors.New("tenant over produce_bytes_per_sec; retry later"))
	ri, _ := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	ce.AddDetail(ri)
	qf, _ := connect.NewErrorDetail(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:t1", Description: "produce_bytes_per_sec"}}})
	ce.AddDetail(qf)
	return ce
}

// limitRefusal is a refusal for a limit waiting does not fix: QuotaFailure
// without RetryInfo.
func limitRefusal(limit string) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, errors.New("tenant holds more than its "+limit))
	qf, _ := connect.NewErrorDetail(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:t1", Description: limit}}})
	ce.AddDetail(qf)
	return ce
}

// requireWaited checks that every call after a rate refusal came at least
// the refusal's delay after it, and that refusals were answered.
func requireWaited(t *testing.T, calls []fakeCall, refusals int) {
	t.Helper()
	n := 0
	for i, c := range calls {
		if c.delay == 0 {
			continue
		}
		n++
		require.Less(t, i+1, len(calls), "the client gave up after a rate refusal")
		gap := calls[i+1].at.Sub(c.at)
		require.GreaterOrEqual(t, gap, c.delay, "call %d came %s after a refusal asking for %s", i+1, gap, c.delay)
	}
	require.Equal(t, refusals, n, "rate refusals answered")
}

func produceAll(ctx context.Context, p *client.Producer, topic string, n int) error {
	recs := make([]*client.Record, n)
	for i := range recs {
		recs[i] = &client.Record{Topic: topic, Value: []byte{byte(i)}}
	}
	return p.ProduceSync(ctx, recs...)
}

// newProducerSync writes recs with a producer of its own, closed after.
func newProducerSync(t *testing.T, c *client.Client, recs ...*client.Record) error {
	p, err := c.NewProducer(t.Context())
	if err != nil {
		return err
	}
	defer p.Close(t.Context())
	return p.ProduceSync(t.Context(), recs...)
}

// oneBatch makes the producer send what ProduceSync gives it as one batch
// (the linger holds the batch until ProduceSync flushes).
var oneBatch = client.WithLinger(time.Minute)

// A producer refused for the tenant's rate sends the same batch again
// after each delay the broker asked for, never sooner, and delivers every
// record without an error; the batch is written once. Stats count the
// refusals and their delays.
func TestThrottleProducerWaitsAndDelivers(t *testing.T) {
	topic := fresh("throttle-waits")
	f := newQuotaScript(t, topic, false)
	c := newClient(t)
	const delay = 150 * time.Millisecond
	f.script("ProduceMany", rateRefusal(delay), rateRefusal(delay), rateRefusal(delay))
	p, err := c.NewProducer(t.Context(), oneBatch, client.WithDeliveryTimeout(time.Minute))
	require.NoError(t, err)
	defer p.Close(t.Context())

	start := time.Now()
	require.NoError(t, produceAll(t.Context(), p, topic, 10))
	require.GreaterOrEqual(t, time.Since(start), 3*delay)
	calls := f.callsOf("ProduceMany")
	require.Len(t, calls, 4, "three refusals, then the write")
	requireWaited(t, calls, 3)
	f.mu.Lock()
	for _, b := range f.batches[1:] {
		require.Equal(t, f.batches[0], b, "the batch is resent as it was (same producer epoch and sequence)")
	}
	sent := len(f.batches[0])
	f.mu.Unlock()
	logged := dataBatches(logBatches(t, topic, 0, 10))
	require.Len(t, logged, 1, "written once: %v", logged)
	require.Equal(t, sent, logged[0].bytes, "written once")

	st := c.Stats().Throttle[client.KindProduce]
	require.Equal(t, client.ThrottleStats{Requests: 3, Time: 3 * delay}, st)
	require.Equal(t, st, c.Stats().ThrottleTotal())
}

// After a rate refusal a partition's producer sends one request at a
// time, then one more after each acknowledgement (1, 2, 4 at a time),
// back up to its max in flight: requests in flight together reach the broker in any order, and
// a broker at the tenant's rate would admit whichever came when its
// bucket was out of debt, often a batch the log must refuse as out of
// sequence.
func TestThrottleProducerWindowAfterRefusal(t *testing.T) {
	topic := fresh("throttle-window")
	f := newQuotaScript(t, topic, false)
	f.gate = &produceGate{}
	c := newClient(t)
	// 1.5 KiB records in batches of at most 2 KiB: one record a request.
	p, err := c.NewProducer(t.Context(), client.WithMaxBatchBytes(2<<10), client.WithMaxInFlight(5), client.WithDeliveryTimeout(time.Minute))
	require.NoError(t, err)
	defer p.Close(t.Context())
	defer f.gate.openUp() // before Close, which waits for the calls held
	const n = 30
	done := make(chan error, 1)
	go func() {
		recs := make([]*client.Record, n)
		for i := range recs {
			recs[i] = &client.Record{Topic: topic, Value: bytes.Repeat([]byte{byte(i)}, 1500)}
		}
		done <- p.ProduceSync(t.Context(), recs...)
	}()
	g := f.gate
	g.waitHeld(t, 5) // five in flight, the producer's max
	refused := g.release(rateRefusal(20 * time.Millisecond))
	// Acknowledgements the producer read before the refusal let it send
	// more: those are served, until the refused batch comes again, alone.
	testenv.Wait(t, 10*time.Second, "the refused batch sent again", func() error {
		if !g.serveUntil(refused) {
			return errors.New("not yet")
		}
		return nil
	})
	// Then 1, 2, 4 at a time: each step's requests arrive with no more
	// than the window in flight.
	for _, window := range []int{1, 2, 4} {
		from := g.waitHeld(t, window) - window
		g.mu.Lock()
		arrivals := slices.Clone(g.arrivals)
		g.mu.Unlock()
		for _, in := range arrivals[from:] {
			require.LessOrEqual(t, in, window, "arrivals %v: at most %d in flight after the refusal", arrivals, window)
		}
		g.release(nil)
	}
	// Back to five, and every record delivered.
	g.waitHeld(t, 5)
	g.openUp()
	require.NoError(t, <-done)
	logged := dataBatches(logBatches(t, topic, 0, n))
	for i := range n {
		require.Equal(t, 1, countIn(logged, string(bytes.Repeat([]byte{byte(i)}, 1500))), "record %d written once", i)
	}
}

// The same when the broker refuses a ProduceMany entry, not the request.
func TestThrottleProducerEntryRefusal(t *testing.T) {
	topic := fresh("throttle-entry")
	f := newQuotaScript(t, topic, true)
	c := newClient(t)
	const delay = 120 * time.Millisecond
	f.script("ProduceMany", rateRefusal(delay), rateRefusal(delay))
	p, err := c.NewProducer(t.Context(), oneBatch)
	require.NoError(t, err)
	defer p.Close(t.Context())

	start := time.Now()
	require.NoError(t, produceAll(t.Context(), p, topic, 5))
	require.GreaterOrEqual(t, time.Since(start), 2*delay)
	calls := f.callsOf("ProduceMany")
	require.Len(t, calls, 3)
	for i := 1; i < len(calls); i++ {
		require.GreaterOrEqual(t, calls[i].at.Sub(calls[i-1].at), delay)
	}
	require.Equal(t, client.ThrottleStats{Requests: 2, Time: 2 * delay}, c.Stats().Throttle[client.KindProduce])
}

// A refusal without a retry delay (a storage limit) is not retried: the
// records fail at once with ErrQuotaExceeded naming the limit, a
// ResourceExhausted that was certainly not written.
func TestThrottleLimitRefusalFailsFast(t *testing.T) {
	for _, entry := range []bool{false, true} {
		t.Run(map[bool]string{false: "request", true: "entry"}[entry], func(t *testing.T) {
			topic := fresh("throttle-limit-" + map[bool]string{false: "request", true: "entry"}[entry])
			f := newQuotaScript(t, topic, entry)
			c := newClient(t)
			f.script("ProduceMany", limitRefusal("max_total_storage_bytes"))
			p, err := c.NewProducer(t.Context(), oneBatch, client.WithDeliveryTimeout(time.Minute))
			require.NoError(t, err)
			defer p.Close(t.Context())

			start := time.Now()
			err = produceAll(t.Context(), p, topic, 3)
			require.Less(t, time.Since(start), 5*time.Second, "failed fast, not at the delivery timeout")
			require.ErrorIs(t, err, client.ErrQuotaExceeded)
			require.NotErrorIs(t, err, client.ErrDeliveryTimeout)
			var qe *client.QuotaError
			require.ErrorAs(t, err, &qe)
			require.Equal(t, "max_total_storage_bytes", qe.Description)
			require.Equal(t, "tenant:t1", qe.Subject)
			require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err))
			require.ErrorContains(t, err, "quota exceeded (max_total_storage_bytes)")
			var de *client.DeliveryError
			require.ErrorAs(t, err, &de)
			require.False(t, de.Indefinite)
			require.Len(t, f.callsOf("ProduceMany"), 1, "not retried")
			require.Empty(t, c.Stats().Throttle)
		})
	}
}

// A producer throttled past its delivery timeout fails then, not before,
// with ErrDeliveryTimeout whose last error is the rate refusal.
func TestThrottleProducerDeliveryTimeout(t *testing.T) {
	topic := fresh("throttle-delivery-timeout")
	f := newQuotaScript(t, topic, false)
	c := newClient(t)
	for range 100 {
		f.script("ProduceMany", rateRefusal(100*time.Millisecond))
	}
	p, err := c.NewProducer(t.Context(), client.WithDeliveryTimeout(700*time.Millisecond))
	require.NoError(t, err)
	defer p.Close(t.Context())
	start := time.Now()
	err = produceAll(t.Context(), p, topic, 1)
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond)
	require.ErrorIs(t, err, client.ErrDeliveryTimeout)
	require.NotErrorIs(t, err, client.ErrQuotaExceeded)
	require.ErrorContains(t, err, "produce_bytes_per_sec")
	calls := f.callsOf("ProduceMany")
	require.GreaterOrEqual(t, len(calls), 3, "retried until the deadline")
	for i := 1; i < len(calls); i++ {
		require.GreaterOrEqual(t, calls[i].at.Sub(calls[i-1].at), 100*time.Millisecond)
	}
}

// A consumer's fetch loop and ListOffsets wait out rate refusals; a
// throttled ListOffsets is not counted against its 20 attempts.
func TestThrottleConsumer(t *testing.T) {
	topic := fresh("throttle-consumer")
	f := newQuotaScript(t, topic, false)
	c := newClient(t)
	require.NoError(t, newProducerSync(t, c, &client.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}))
	const delay = 20 * time.Millisecond
	for range 25 {
		f.script("ListOffsets", rateRefusal(delay))
	}
	const fetchDelay = 150 * time.Millisecond
	f.script("Fetch", rateRefusal(fetchDelay), rateRefusal(fetchDelay))

	start, hw, err := c.Watermarks(t.Context(), topic, 0)
	require.NoError(t, err, "25 rate refusals do not use up the 20 attempts")
	require.Equal(t, int64(1), hw-start)
	requireWaited(t, f.callsOf("ListOffsets"), 25)

	cs, err := c.NewConsumer()
	require.NoError(t, err)
	defer cs.Close()
	require.NoError(t, cs.Assign(t.Context(), topic, 0, client.At(0)))
	recs, err := cs.Poll(t.Context())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	requireWaited(t, f.callsOf("Fetch"), 2)

	st := c.Stats().Throttle
	require.Equal(t, client.ThrottleStats{Requests: 25, Time: 25 * delay}, st[client.KindListOffsets])
	require.Equal(t, client.ThrottleStats{Requests: 2, Time: 2 * fetchDelay}, st[client.KindFetch])
}

// Metadata (here New's, from the control plane), producer ids and a
// group's heartbeats wait out rate refusals; a group refused for the
// groups limit fails at once.
func TestThrottleMetadataProducerIDGroup(t *testing.T) {
	topic := fresh("throttle-metadata")
	f := newQuotaScript(t, topic, false)
	const delay = 100 * time.Millisecond
	f.script("GetMetadata", rateRefusal(delay), rateRefusal(delay))
	c := newClient(t)
	requireWaited(t, f.callsOf("GetMetadata"), 2)

	f.script("InitProducerId", rateRefusal(delay))
	p, err := c.NewProducer(t.Context())
	require.NoError(t, err)
	require.True(t, p.Idempotent())
	require.NoError(t, p.Close(t.Context()))
	requireWaited(t, f.callsOf("InitProducerId"), 1)

	f.script("GroupHeartbeat", rateRefusal(delay), rateRefusal(delay))
	g, err := c.NewGroupConsumer(t.Context(), topic+"-g", []string{topic})
	require.NoError(t, err)
	// The running member's heartbeats (every 100 ms) wait out a longer
	// delay too.
	f.script("GroupHeartbeat", rateRefusal(300*time.Millisecond))
	require.Eventually(t, func() bool { return len(f.callsOf("GroupHeartbeat")) >= 6 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, g.Close(t.Context()))
	requireWaited(t, f.callsOf("GroupHeartbeat"), 3)

	f.script("GroupHeartbeat", limitRefusal("max_groups"))
	start := time.Now()
	_, err = c.NewGroupConsumer(t.Context(), topic+"-g2", []string{topic})
	require.ErrorIs(t, err, client.ErrQuotaExceeded)
	require.ErrorContains(t, err, "max_groups")
	require.Less(t, time.Since(start), 2*time.Second)

	st := c.Stats().Throttle
	require.Equal(t, client.ThrottleStats{Requests: 2, Time: 2 * delay}, st[client.KindMetadata])
	require.Equal(t, client.ThrottleStats{Requests: 1, Time: delay}, st[client.KindInitProducerID])
	require.Equal(t, client.ThrottleStats{Requests: 3, Time: 2*delay + 300*time.Millisecond}, st[client.KindGroup])
}

// A member's leave refused for its rate is sent again once the delay
// asked for has passed: Close succeeds and the member is gone (sluice
// consume --group failed so on a sluice dev just started, whose quota
// allotments had not settled yet).
func TestThrottleGroupLeaveWaitsOut(t *testing.T) {
	topic := fresh("throttle-leave")
	createTopic(t, topic, 1, nil)
	group := topic + "-g"
	const delay = 100 * time.Millisecond
	var (
		mu     sync.Mutex
		leaves []time.Time
	)
	// Every GroupHeartbeat matches; the hook refuses only the group's
	// first leave. No other test adds a GroupHeartbeat fault while this
	// one runs (this one is not parallel).
	addFault(t, localcluster.Fault{Procedure: "GroupHeartbeat", Hook: func(_ context.Context, c localcluster.Call) error {
		req, ok := c.Request.(*sluicev1.GroupHeartbeatRequest)
		if !ok || req.GetGroup() != group || req.GetMemberEpoch() != -1 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		leaves = append(leaves, time.Now())
		if len(leaves) == 1 {
			return rateRefusal(delay)
		}
		return nil
	}})
	c := newClient(t)
	g, err := c.NewGroupConsumer(t.Context(), group, []string{topic})
	require.NoError(t, err)
	require.NoError(t, g.Close(t.Context()))
	mu.Lock()
	require.Len(t, leaves, 2, "the refused leave sent again")
	require.GreaterOrEqual(t, leaves[1].Sub(leaves[0]), delay, "after the delay asked for")
	mu.Unlock()
	ga, err := c.GroupAdmin()
	require.NoError(t, err)
	d, err := ga.DescribeGroup(t.Context(), connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: group}))
	require.NoError(t, err)
	require.Empty(t, d.Msg.GetMembers(), "the member left")
	require.Equal(t, client.ThrottleStats{Requests: 1, Time: delay}, c.Stats().Throttle[client.KindGroup])
}

// A transactional producer's calls to its coordinator and its batches
// wait out rate refusals: the transaction commits.
func TestThrottleTransactionalCalls(t *testing.T) {
	f := newTxnScript(t, fresh("throttle-txn"))
	const delay = 100 * time.Millisecond
	f.script(func(f *txnScript) { f.initErrs = []error{rateRefusal(delay), rateRefusal(delay)} })
	c := newClient(t)
	start := time.Now()
	tp, err := c.NewTransactionalProducer(t.Context(), f.topic+"-job")
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 2*delay)
	require.Len(t, f.initCalls(), 3)

	f.script(func(f *txnScript) {
		f.produceErrs = []error{rateRefusal(delay)}
		f.endErrs = []error{rateRefusal(delay)}
	})
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(t.Context(), rec(f.topic, "a")))
	require.NoError(t, tp.Commit(t.Context()))
	require.Len(t, f.endCalls(), 2)
	require.NoError(t, tp.Close(t.Context()))

	st := c.Stats().Throttle
	require.Equal(t, int64(2), st[client.KindInitProducerID].Requests)
	require.Equal(t, int64(1), st[client.KindProduce].Requests)
	require.Equal(t, int64(1), st[client.KindTransaction].Requests)
}
