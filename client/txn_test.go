package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

// readAll reads every partition of topic up to its end now (with
// ReadCommitted: up to its last stable offset) and returns the values.
func readAll(t *testing.T, c *client.Client, topic string, iso client.Isolation) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n, err := c.Partitions(ctx, topic)
	require.NoError(t, err)
	cs, err := c.NewConsumer(client.WithIsolation(iso), client.WithFetchMaxWait(50*time.Millisecond))
	require.NoError(t, err)
	defer cs.Close()
	for p := range n {
		require.NoError(t, cs.AssignUntil(ctx, topic, p, client.Earliest(), client.Latest()))
	}
	var out []string
	for {
		recs, err := cs.Poll(ctx)
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
	}
}

func txnRecs(topic string, prefix string, n int) []*client.Record {
	out := make([]*client.Record, n)
	for i := range out {
		out[i] = &client.Record{Topic: topic, Key: fmt.Appendf(nil, "%d", i), Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	return out
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// A committed transaction is visible to read-committed consumers, whole;
// an aborted one never is; read-uncommitted consumers see both.
func TestTxnCommitVisibleAbortInvisible(t *testing.T) {
	txnVis := fresh("txn-vis")
	vis1 := fresh("vis-1")
	createTopic(t, txnVis, 3, nil)
	c := newClient(t)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, vis1)
	require.NoError(t, err)
	defer tp.Close(ctx)

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, txnRecs(txnVis, "one", 20)...))
	require.NoError(t, tp.Commit(ctx))

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, txnRecs(txnVis, "aborted", 7)...))
	require.NoError(t, tp.Abort(ctx))

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, txnRecs(txnVis, "two", 5)...))
	require.NoError(t, tp.Commit(ctx))

	want := append(values("one", 20), values("two", 5)...)
	require.ElementsMatch(t, want, readAll(t, c, txnVis, client.ReadCommitted), "committed only, each once")
	require.ElementsMatch(t, append(want, values("aborted", 7)...), readAll(t, c, txnVis, client.ReadUncommitted))
}

// A read-committed consumer waits at the first record of an open
// transaction, and gets the transaction's records once it commits; a
// read-uncommitted one sees them at once.
func TestTxnReadCommittedWaitsAtLSO(t *testing.T) {
	txnLso := fresh("txn-lso")
	lso1 := fresh("lso-1")
	createTopic(t, txnLso, 1, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: txnLso, Value: []byte("before")}))

	tp, err := c.NewTransactionalProducer(ctx, lso1)
	require.NoError(t, err)
	defer tp.Close(ctx)
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, txnRecs(txnLso, "open", 3)...))
	// Written outside the transaction, after its first record: held back too.
	require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: txnLso, Value: []byte("after")}))
	require.NoError(t, p.Close(ctx))

	lso, err := c.LastStableOffset(ctx, txnLso, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), lso, "the open transaction's first offset")
	require.Equal(t, []string{"before"}, readAll(t, c, txnLso, client.ReadCommitted))
	require.Equal(t, []string{"before", "open-0", "open-1", "open-2", "after"}, readAll(t, c, txnLso, client.ReadUncommitted))

	follow, err := c.NewConsumer(client.WithIsolation(client.ReadCommitted), client.WithFetchMaxWait(50*time.Millisecond))
	require.NoError(t, err)
	defer follow.Close()
	require.NoError(t, follow.Assign(ctx, txnLso, 0, client.Earliest()))
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			recs, err := follow.Poll(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			for _, r := range recs {
				seen = append(seen, string(r.Value))
			}
			n := len(seen)
			mu.Unlock()
			if n >= 5 {
				return
			}
		}
	}()
	testenv.Wait(t, 10*time.Second, "the read-committed consumer reads up to the open transaction", func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(seen, []string{"before"}) {
			return fmt.Errorf("seen %q", seen)
		}
		return nil
	})
	// Still held back while the transaction is open (checked once more
	// after more fetches had the chance to return it).
	_, err = c.LastStableOffset(ctx, txnLso, 0)
	require.NoError(t, err)
	mu.Lock()
	require.Equal(t, []string{"before"}, seen)
	mu.Unlock()

	require.NoError(t, tp.Commit(ctx))
	<-done
	require.Equal(t, []string{"before", "open-0", "open-1", "open-2", "after"}, seen)
	lso, err = c.LastStableOffset(ctx, txnLso, 0)
	require.NoError(t, err)
	_, hw, err := c.Watermarks(ctx, txnLso, 0)
	require.NoError(t, err)
	require.Equal(t, hw, lso, "nothing open: the LSO is the high watermark")
}

// A second instance with the same transactional id fences the first: the
// first's open transaction is aborted (never visible) and its calls fail
// with ErrProducerFenced, fatal; the second goes on.
func TestTxnFencedBySecondInstance(t *testing.T) {
	txnFence := fresh("txn-fence")
	fence1 := fresh("fence-1")
	createTopic(t, txnFence, 2, nil)
	c := newClient(t)
	ctx := t.Context()
	first, err := c.NewTransactionalProducer(ctx, fence1)
	require.NoError(t, err)
	require.NoError(t, first.Begin())
	require.NoError(t, first.ProduceSync(ctx, txnRecs(txnFence, "zombie", 4)...))

	second, err := c.NewTransactionalProducer(ctx, fence1)
	require.NoError(t, err)
	defer second.Close(ctx)

	err = first.ProduceSync(ctx, txnRecs(txnFence, "zombie-late", 2)...)
	require.Error(t, err, "a produce of the fenced instance is refused")
	err = first.Commit(ctx)
	require.Error(t, err)
	if !errorsIsFenced(err) {
		// A partition's refusal makes the transaction abortable; the
		// coordinator then says fenced.
		require.ErrorIs(t, err, client.ErrTransactionAbortable)
		err = first.Abort(ctx)
	}
	require.ErrorIs(t, err, client.ErrProducerFenced)
	require.ErrorIs(t, err, client.ErrTransactionFatal)
	require.ErrorIs(t, first.Begin(), client.ErrProducerFenced, "fatal: for good")
	require.NoError(t, first.Close(ctx))

	require.NoError(t, second.Begin())
	require.NoError(t, second.ProduceSync(ctx, txnRecs(txnFence, "second", 3)...))
	require.NoError(t, second.Commit(ctx))
	require.ElementsMatch(t, values("second", 3), readAll(t, c, txnFence, client.ReadCommitted), "the zombie's records never visible")
}

func errorsIsFenced(err error) bool { return errors.Is(err, client.ErrProducerFenced) }

// ConsumeTransformProduce reads A and writes each value transformed to B
// with the offsets in the same transactions; stopped midway and started
// again (another process with the same transactional id), every input
// appears in B exactly once for a read-committed reader, and the group's
// committed offsets are A's ends.
func TestTxnConsumeTransformProduce(t *testing.T) {
	ctpA := fresh("ctp-a")
	ctpB := fresh("ctp-b")
	ctpName := fresh("ctp")
	ctp0 := fresh("ctp-0")
	createTopic(t, ctpA, 3, nil)
	createTopic(t, ctpB, 2, nil)
	c := newClient(t)
	ctx := t.Context()
	const n = 300
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	var in []*client.Record
	for i := range n {
		in = append(in, &client.Record{Topic: ctpA, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	require.NoError(t, p.ProduceSync(ctx, in...))
	require.NoError(t, p.Close(ctx))

	transformed := make(chan struct{}, n*2)
	transform := func(_ context.Context, r *client.Record) ([]*client.Record, error) {
		transformed <- struct{}{}
		return []*client.Record{{Topic: ctpB, Key: r.Key, Value: append([]byte("out-"), r.Value...)}}, nil
	}
	runOnce := func(until func() bool) {
		g, err := c.NewGroupConsumer(ctx, ctpName, []string{ctpA}, client.WithCommitMode(client.CommitTransactional()),
			client.WithConsumerOptions(client.WithFetchMaxBytes(2048))) // small polls: many transactions
		require.NoError(t, err)
		tp, err := c.NewTransactionalProducer(ctx, ctp0)
		require.NoError(t, err)
		run, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- client.ConsumeTransformProduce(run, g, tp, transform) }()
		testenv.Wait(t, 60*time.Second, "the job gets far enough", func() error {
			if !until() {
				return fmt.Errorf("%d transformed so far", len(transformed))
			}
			return nil
		})
		stop()
		require.NoError(t, <-errc)
		require.NoError(t, tp.Close(ctx))
		require.NoError(t, g.Close(ctx))
	}
	runOnce(func() bool { return len(transformed) >= n/3 })
	// The sum of the group's committed offsets; -1 while a partition's
	// are pending in a transaction (FetchOffsets answers Unavailable).
	committed := func() int64 {
		admin, err := c.GroupAdmin()
		require.NoError(t, err)
		res, err := admin.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: ctpName}))
		if connect.CodeOf(err) == connect.CodeUnavailable {
			return -1
		}
		require.NoError(t, err)
		var sum int64
		for _, o := range res.Msg.GetOffsets() {
			sum += max(o.GetOffset(), 0)
		}
		return sum
	}
	runOnce(func() bool { return committed() == n })

	out := readAll(t, c, ctpB, client.ReadCommitted)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("out-v%d", i)
	}
	require.ElementsMatch(t, want, out, "every input exactly once in B")
	require.Equal(t, int64(n), committed(), "the group's offsets are A's ends")
}

// A transaction of ConsumeTransformProduce that cannot commit (here a
// record for a topic that does not exist, once) is aborted, the member
// rewound to the committed offsets, and its input transformed again: B
// still has each input exactly once.
func TestTxnConsumeTransformProduceAbortRewinds(t *testing.T) {
	ctpaA := fresh("ctpa-a")
	ctpaB := fresh("ctpa-b")
	ctpaName := fresh("ctpa")
	ctpa0 := fresh("ctpa-0")
	createTopic(t, ctpaA, 2, nil)
	createTopic(t, ctpaB, 2, nil)
	c := newClient(t)
	ctx := t.Context()
	const n = 50
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: ctpaA, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}))
	}
	require.NoError(t, p.Close(ctx))

	g, err := c.NewGroupConsumer(ctx, ctpaName, []string{ctpaA}, client.WithCommitMode(client.CommitTransactional()))
	require.NoError(t, err)
	defer g.Close(ctx)
	tp, err := c.NewTransactionalProducer(ctx, ctpa0)
	require.NoError(t, err)
	defer tp.Close(ctx)
	var mu sync.Mutex
	calls := map[string]int{}
	transform := func(_ context.Context, r *client.Record) ([]*client.Record, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[string(r.Value)]++
		out := &client.Record{Topic: ctpaB, Key: r.Key, Value: append([]byte("out-"), r.Value...)}
		if string(r.Value) == "v7" && calls["v7"] == 1 {
			out.Topic = "no-such-topic" // fails the transaction once
		}
		return []*client.Record{out}, nil
	}
	run, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- client.ConsumeTransformProduce(run, g, tp, transform) }()
	testenv.Wait(t, 60*time.Second, "every input committed", func() error {
		if got := len(readAll(t, c, ctpaB, client.ReadCommitted)); got < n {
			return fmt.Errorf("%d of %d outputs", got, n)
		}
		return nil
	})
	stop()
	require.NoError(t, <-errc)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("out-v%d", i)
	}
	require.ElementsMatch(t, want, readAll(t, c, ctpaB, client.ReadCommitted))
	mu.Lock()
	require.Equal(t, 2, calls["v7"], "v7's transaction was aborted and transformed again")
	mu.Unlock()
}

// A transaction left open past its timeout is aborted by the coordinator:
// the producer's Commit says ErrTransactionAbortable (not fatal), Abort
// takes the epoch the coordinator gave, and the next transaction commits.
// The timed-out transaction's records are never visible.
func TestTxnTimeoutIsAbortable(t *testing.T) {
	txnTimeout := fresh("txn-timeout")
	timeout1 := fresh("timeout-1")
	createTopic(t, txnTimeout, 1, nil)
	c := newClient(t)
	ctx := t.Context()
	// The timeout bounds the next transaction too (begin to commit, a
	// produce and a commit at acks=all): 1 s did not hold on a loaded
	// machine, where that one was aborted by its timeout as well.
	tp, err := c.NewTransactionalProducer(ctx, timeout1, client.WithTransactionTimeout(5*time.Second))
	require.NoError(t, err)
	defer tp.Close(ctx)
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, txnRecs(txnTimeout, "late", 3)...))

	admin, err := c.TransactionAdmin()
	require.NoError(t, err)
	testenv.Wait(t, 30*time.Second, "the coordinator aborts the transaction at its timeout", func() error {
		res, err := admin.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: timeout1}))
		if err != nil {
			return err
		}
		if s := res.Msg.GetTransaction().GetState(); s != sluicev1.TxnState_TXN_STATE_COMPLETE_ABORT {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	err = tp.Commit(ctx)
	require.ErrorIs(t, err, client.ErrTransactionAbortable)
	require.NotErrorIs(t, err, client.ErrTransactionFatal)
	require.NoError(t, tp.Abort(ctx))

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, txnRecs(txnTimeout, "next", 2)...))
	require.NoError(t, tp.Commit(ctx))
	require.Equal(t, values("next", 2), readAll(t, c, txnTimeout, client.ReadCommitted))
}

// A ConsumeTransformProduce job whose transactional id a second instance
// takes over stops with ErrProducerFenced at its next transaction, which
// is aborted; the second instance goes on from the committed offsets, and
// B has every input once.
func TestTxnConsumeTransformProduceFencedZombie(t *testing.T) {
	ctpzA := fresh("ctpz-a")
	ctpzB := fresh("ctpz-b")
	ctpzName := fresh("ctpz")
	ctpz0 := fresh("ctpz-0")
	createTopic(t, ctpzA, 1, nil)
	createTopic(t, ctpzB, 1, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	defer p.Close(ctx)
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: ctpzA, Value: fmt.Appendf(nil, "v%d", i)}))
		}
	}
	transform := func(_ context.Context, r *client.Record) ([]*client.Record, error) {
		return []*client.Record{{Topic: ctpzB, Value: append([]byte("out-"), r.Value...)}}, nil
	}
	outputs := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("out-v%d", i)
		}
		return out
	}
	produce(0, 10)

	g1, err := c.NewGroupConsumer(ctx, ctpzName, []string{ctpzA}, client.WithCommitMode(client.CommitTransactional()))
	require.NoError(t, err)
	tp1, err := c.NewTransactionalProducer(ctx, ctpz0)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- client.ConsumeTransformProduce(ctx, g1, tp1, transform) }()
	testenv.Wait(t, 30*time.Second, "the first instance transforms the first inputs", func() error {
		if got := readAll(t, c, ctpzB, client.ReadCommitted); len(got) < 10 {
			return fmt.Errorf("%d outputs", len(got))
		}
		return nil
	})

	tp2, err := c.NewTransactionalProducer(ctx, ctpz0) // fences tp1
	require.NoError(t, err)
	defer tp2.Close(ctx)
	produce(10, 15)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, client.ErrProducerFenced)
		require.ErrorIs(t, err, client.ErrTransactionFatal)
	case <-time.After(30 * time.Second):
		t.Fatal("the fenced instance did not stop")
	}
	require.ElementsMatch(t, outputs(10), readAll(t, c, ctpzB, client.ReadCommitted), "nothing of the fenced instance's last transaction")
	require.NoError(t, g1.Close(ctx))

	g2, err := c.NewGroupConsumer(ctx, ctpzName, []string{ctpzA}, client.WithCommitMode(client.CommitTransactional()))
	require.NoError(t, err)
	defer g2.Close(ctx)
	run, stop := context.WithCancel(ctx)
	errc2 := make(chan error, 1)
	go func() { errc2 <- client.ConsumeTransformProduce(run, g2, tp2, transform) }()
	testenv.Wait(t, 30*time.Second, "the second instance transforms the rest", func() error {
		if got := readAll(t, c, ctpzB, client.ReadCommitted); len(got) < 15 {
			return fmt.Errorf("%d outputs", len(got))
		}
		return nil
	})
	stop()
	require.NoError(t, <-errc2)
	require.ElementsMatch(t, outputs(15), readAll(t, c, ctpzB, client.ReadCommitted))
}
