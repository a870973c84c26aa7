package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// readAll reads topic from the start with isolation until it has want
// records, and then for one more second.
func readAll(t *testing.T, topic string, isolation kgo.IsolationLevel, want int) []*kgo.Record {
	t.Helper()
	cl := client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(isolation),
		kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %s: %d of %d records", topic, len(out), want)
		fs.EachError(func(_ string, _ int32, err error) { t.Errorf("fetch %s: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	// Nothing beyond: what else a second brings is kept, for the
	// caller's checks.
	wctx, wcancel := context.WithTimeout(ctx, time.Second) // window: an absence
	defer wcancel()
	for wctx.Err() == nil {
		out = append(out, cl.PollFetches(wctx).Records()...)
	}
	return out
}

// txnModes are the two ways Kafka clients speak transactions (see Txns):
// franz-go uses KIP-890 part 2 when every version it needs is served (as
// it is), and the older way when its versions are capped below them, as
// every older client's are.
var txnModes = []struct {
	name string
	opts []kgo.Opt
	// bumps: every end bumps the producer epoch.
	bumps bool
}{
	{"before KIP-890 part 2", []kgo.Opt{kgo.MaxVersions(beforeKIP890p2())}, false},
	{"KIP-890 part 2", nil, true},
}

// beforeKIP890p2 are franz-go's versions capped below KIP-890 part 2's.
func beforeKIP890p2() *kversion.Versions {
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
	vs.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 4)
	vs.SetMaxKeyVersion(kmsg.TxnOffsetCommit.Int16(), 4)
	return vs
}

// TestTransactionsKafkaClient: franz-go's transactional producer, in
// both ways (txnModes): committed transactions are read once by a
// read_committed consumer and aborted ones never; read_uncommitted sees
// both; the admin API describes and lists the id; a second incarnation
// fences the first.
func TestTransactionsKafkaClient(t *testing.T) {
	t.Parallel()
	for i, mode := range txnModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			sfx := fmt.Sprintf("%d-%d", i, time.Now().UnixNano())
			testTransactions(t, "txn-out-"+sfx, "txn-producer-"+sfx, mode.bumps, mode.opts...)
		})
	}
}

func testTransactions(t *testing.T, topic, id string, bumps bool, opts ...kgo.Opt) {
	ctx := t.Context()
	adm := kadm.NewClient(client(t))
	createTopic(t, adm, topic, 2)

	p := client(t, append([]kgo.Opt{kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(30 * time.Second)}, opts...)...)
	txn := func(from, n int, end kgo.TransactionEndTry) {
		t.Helper()
		require.NoError(t, p.BeginTransaction())
		for i := from; i < from+n; i++ {
			r := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(fmt.Sprintf("v%d", i)), Partition: int32(i % 2)}
			require.NoError(t, p.ProduceSync(ctx, r).FirstErr())
		}
		require.NoError(t, p.EndTransaction(ctx, end))
	}
	txn(0, 10, kgo.TryCommit)
	txn(100, 5, kgo.TryAbort)
	txn(10, 10, kgo.TryCommit)

	committed := readAll(t, topic, kgo.ReadCommitted(), 20)
	seen := map[string]bool{}
	for _, r := range committed {
		k := string(r.Key)
		n, _ := strconv.Atoi(k)
		require.Less(t, n, 100, "an aborted record was read with read_committed: %s", k)
		require.False(t, seen[k], "record %s read twice", k)
		seen[k] = true
	}
	require.Len(t, seen, 20)
	require.Len(t, readAll(t, topic, kgo.ReadUncommitted(), 25), 25, "read_uncommitted sees the aborted records too")

	// The admin API: the id's coordinator describes it; each broker lists
	// its own.
	ds, err := adm.DescribeTransactions(ctx, id)
	require.NoError(t, err)
	d := ds[id]
	require.NoError(t, d.Err)
	require.Equal(t, "CompleteCommit", d.State)
	require.EqualValues(t, 30000, d.TimeoutMillis)
	pid, epoch := d.ProducerID, d.ProducerEpoch
	require.GreaterOrEqual(t, pid, int64(0))
	if bumps {
		// franz-go opts in to part 2 when it has seen a broker's
		// ApiVersions at a transaction's begin, or after an end (then
		// with a new epoch): when is its business, so the epoch is not
		// asserted here (TestTransactionsDelayedRequests asserts the
		// bump, sent raw).
		t.Logf("epoch %d after three transactions", epoch)
	} else {
		require.EqualValues(t, 0, epoch, "ends keep the epoch")
	}
	// Each partition's leader knows the producer, with no transaction
	// open (DescribeProducers, what tools use to find hanging ones).
	dp, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}}})
	require.NoError(t, err)
	found := 0
	dp.EachPartition(func(d kadm.DescribedProducersPartition) {
		require.NoError(t, d.Err, "partition %d", d.Partition)
		for _, ap := range d.ActiveProducers {
			if ap.ProducerID == pid {
				found++
				require.EqualValues(t, -1, ap.CurrentTxnStartOffset, "partition %d", d.Partition)
				require.Equal(t, epoch, ap.ProducerEpoch, "partition %d", d.Partition)
				require.GreaterOrEqual(t, ap.CoordinatorEpoch, int32(0), "a marker was written, partition %d", d.Partition)
			}
		}
	})
	require.Equal(t, 2, found)
	ls, err := adm.ListTransactions(ctx, nil, []string{"CompleteCommit"})
	require.NoError(t, err)
	require.Contains(t, ls.TransactionalIDs(), id)
	ls, err = adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	require.NoError(t, err)
	require.NotContains(t, ls.TransactionalIDs(), id)

	// A second incarnation fences the first.
	p2 := client(t, append([]kgo.Opt{kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic)}, opts...)...)
	require.NoError(t, p2.BeginTransaction()) // initializes the producer id: epoch bumped
	require.NoError(t, p2.ProduceSync(ctx, &kgo.Record{Key: []byte("200"), Partition: 0}).FirstErr())
	require.NoError(t, p2.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, p.BeginTransaction())
	err = p.ProduceSync(ctx, &kgo.Record{Key: []byte("300"), Partition: 1}).FirstErr()
	require.Error(t, err, "the fenced incarnation cannot write")
	require.True(t, errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch), "%v", err)
	ds, err = adm.DescribeTransactions(ctx, id)
	require.NoError(t, err)
	require.Equal(t, pid, ds[id].ProducerID)
	require.Greater(t, ds[id].ProducerEpoch, epoch)
}

// TestTransactionsConsumeTransformProduce is franz-go's exactly-once
// pipeline (GroupTransactSession: a classic group's consumer whose offsets
// commit in the producer's transaction, TxnOffsetCommit): every input
// record reaches the output exactly once for read_committed, and the
// group's committed offsets are the input's ends.
func TestTransactionsConsumeTransformProduce(t *testing.T) {
	t.Parallel()
	for i, mode := range txnModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testConsumeTransformProduce(t, fmt.Sprintf("etl-%d-%d", i, time.Now().UnixNano()), mode.opts...)
		})
	}
}

func testConsumeTransformProduce(t *testing.T, name string, opts ...kgo.Opt) {
	ctx := t.Context()
	adm := kadm.NewClient(client(t))
	in, out, group := name+"-in", name+"-out", name+"-group"
	createTopic(t, adm, in, 2)
	createTopic(t, adm, out, 2)
	const n = 200
	seed := client(t, kgo.DefaultProduceTopic(in))
	for i := range n {
		seed.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("seed: %v", err)
			}
		})
	}
	require.NoError(t, seed.Flush(ctx))

	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{
		kgo.SeedBrokers(bootstrap...), kgo.SASL(plain.Auth{User: tenantName, Pass: tenant.APIKey}.AsMechanism()),
		kgo.TransactionalID(name), kgo.DefaultProduceTopic(out),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(in), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RetryTimeout(20 * time.Second),
	}, opts...)...)
	require.NoError(t, err)
	defer sess.Close()
	done := 0
	deadline, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for done < n {
		fs := sess.PollFetches(deadline)
		require.NoError(t, deadline.Err(), "%d of %d records transformed", done, n)
		fs.EachError(func(_ string, _ int32, err error) { t.Errorf("fetch: %v", err) })
		require.NoError(t, sess.Begin())
		recs := fs.Records()
		for _, r := range recs {
			sess.Produce(deadline, &kgo.Record{Key: r.Key, Value: append([]byte("out-"), r.Value...)}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
		committed, err := sess.End(deadline, kgo.TryCommit)
		require.NoError(t, err)
		if committed {
			done += len(recs)
		}
	}
	seen := map[string]int{}
	for _, r := range readAll(t, out, kgo.ReadCommitted(), n) {
		seen[string(r.Key)]++
	}
	require.Len(t, seen, n)
	for k, c := range seen {
		require.Equal(t, 1, c, "output of input %s read %d times", k, c)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	ends, err := adm.ListEndOffsets(ctx, in)
	require.NoError(t, err)
	ends.Each(func(e kadm.ListedOffset) {
		o, ok := offs.Lookup(in, e.Partition)
		require.True(t, ok, "partition %d has no committed offset", e.Partition)
		require.Equal(t, e.Offset, o.At, "partition %d", e.Partition)
	})
}

// TestTransactionRequestsRefused: the transaction requests' answers to
// what a client may not do: a partition not added before writing is
// refused (KIP-890 part 1's verification), an unknown partition is named
// and the rest not attempted, an unknown id is not found.
func TestTransactionRequestsRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cl := client(t)
	adm := kadm.NewClient(cl)
	topic := fmt.Sprintf("txn-refused-%d", time.Now().UnixNano())
	createTopic(t, adm, topic, 1)

	id := topic + "-id"
	coordID, ires := initTxn(t, cl, id)
	coord := cl.Broker(int(coordID))

	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, ires.ProducerID, ires.ProducerEpoch
	for _, topic := range []string{topic, "no-such-topic"} {
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{0}
		add.Topics = append(add.Topics, rt)
	}
	ares, err := add.RequestWith(ctx, coord)
	require.NoError(t, err)
	codes := map[string]int16{}
	for _, rt := range ares.Topics {
		codes[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	require.Equal(t, map[string]int16{topic: kerr.OperationNotAttempted.Code, "no-such-topic": kerr.UnknownTopicOrPartition.Code}, codes)

	// A transactional write to a partition the client did not add: below
	// Produce v12 refused (KIP-890 part 1's verification), at v12 it adds
	// the partition (part 2).
	txnID := id
	pr := produceRequest(topic, -1, 10000, transactionalBatch(t, ires.ProducerID, ires.ProducerEpoch))
	pr.TransactionID = &txnID
	md, err := adm.Metadata(ctx, topic)
	require.NoError(t, err)
	leader := int(md.Topics[topic].Partitions[0].Leader)
	old := client(t, kgo.MaxVersions(beforeKIP890p2()))
	pres, err := pr.RequestWith(ctx, old.Broker(leader))
	require.NoError(t, err)
	require.EqualValues(t, 11, pres.Version)
	require.Equal(t, kerr.InvalidTxnState.Code, pres.Topics[0].Partitions[0].ErrorCode, "%v", pres.Topics[0].Partitions[0].ErrorMessage)
	desc := kmsg.NewPtrDescribeTransactionsRequest()
	desc.TransactionalIDs = []string{id}
	dres, err := desc.RequestWith(ctx, coord)
	require.NoError(t, err)
	require.Equal(t, "Empty", dres.TransactionStates[0].State, "nothing was added")
	pres, err = pr.RequestWith(ctx, cl.Broker(leader))
	require.NoError(t, err)
	require.EqualValues(t, 12, pres.Version)
	require.Zero(t, pres.Topics[0].Partitions[0].ErrorCode, "%v", pres.Topics[0].Partitions[0].ErrorMessage)
	dres, err = desc.RequestWith(ctx, coord)
	require.NoError(t, err)
	require.Equal(t, "Ongoing", dres.TransactionStates[0].State)
	require.Len(t, dres.TransactionStates[0].Topics, 1)
	require.Equal(t, topic, dres.TransactionStates[0].Topics[0].Topic)

	// An end anywhere but at the coordinator: NOT_COORDINATOR. At v5 the
	// end answers the bumped epoch.
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, ires.ProducerID, ires.ProducerEpoch, false
	require.NotEmpty(t, md.Brokers)
	for _, b := range md.Brokers {
		if b.NodeID == coordID {
			continue
		}
		eres, err := end.RequestWith(ctx, cl.Broker(int(b.NodeID)))
		require.NoError(t, err)
		require.Equal(t, kerr.NotCoordinator.Code, eres.ErrorCode, "broker %d", b.NodeID)
	}
	eres, err := end.RequestWith(ctx, coord)
	require.NoError(t, err)
	require.Zero(t, eres.ErrorCode)
	require.EqualValues(t, 5, eres.Version)
	require.Equal(t, ires.ProducerID, eres.ProducerID)
	require.Equal(t, ires.ProducerEpoch+1, eres.ProducerEpoch)

	// An id nobody initialized, at its coordinator.
	desc.TransactionalIDs = []string{topic + "-never"}
	dres, err = desc.RequestWith(ctx, cl.Broker(int(findTxnCoordinator(t, cl, topic+"-never"))))
	require.NoError(t, err)
	require.Len(t, dres.TransactionStates, 1)
	require.Equal(t, kerr.TransactionalIDNotFound.Code, dres.TransactionStates[0].ErrorCode)
}

// findTxnCoordinator asks FindCoordinator for the transactional id's
// coordinator until one is answered (COORDINATOR_NOT_AVAILABLE while the
// transaction-state partitions get their first leaders).
func findTxnCoordinator(t *testing.T, cl *kgo.Client, id string) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.CoordinatorType, find.CoordinatorKey = 1, id
	for {
		res, err := find.RequestWith(ctx, cl)
		require.NoError(t, err)
		if res.ErrorCode == 0 {
			return res.NodeID
		}
		require.Equal(t, kerr.CoordinatorNotAvailable.Code, res.ErrorCode, "%s", *res.ErrorMessage)
		select {
		case <-ctx.Done():
			t.Fatalf("no coordinator for %q: %s", id, *res.ErrorMessage)
		case <-time.After(50 * time.Millisecond): // poll: the client's backoff
		}
	}
}

// initTxn asks InitProducerId for the transactional id at its
// coordinator, found again while it is moving (its partition's first
// leader just elected), as clients do; it returns the coordinator and the
// answer.
func initTxn(t *testing.T, cl *kgo.Client, id string) (int32, *kmsg.InitProducerIDResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 10000
	for {
		coordID := findTxnCoordinator(t, cl, id)
		ires, err := init.RequestWith(ctx, cl.Broker(int(coordID)))
		require.NoError(t, err)
		if ires.ErrorCode != kerr.NotCoordinator.Code && ires.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
			require.Zero(t, ires.ErrorCode, "init %q: %s", id, kerr.ErrorForCode(ires.ErrorCode))
			return coordID, ires
		}
		select {
		case <-ctx.Done():
			t.Fatalf("init %q: still %s", id, kerr.ErrorForCode(ires.ErrorCode))
		case <-time.After(50 * time.Millisecond): // poll: the client's backoff
		}
	}
}

// transactionalBatch is a Kafka RecordBatch v2 of one transactional
// record of producer pid at epoch, sequence 0.
func transactionalBatch(t *testing.T, pid int64, epoch int16) []byte {
	t.Helper()
	return transactionalBatchAt(t, pid, epoch, 0, "x")
}

// transactionalBatchAt is a Kafka RecordBatch v2 of one transactional
// record of value, of producer pid at epoch, sequence seq.
func transactionalBatchAt(t *testing.T, pid int64, epoch int16, seq int32, value string) []byte {
	t.Helper()
	ts := time.Now().UnixMilli()
	batch, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, ProducerID: pid, ProducerEpoch: epoch,
		BaseSequence: seq, FirstTimestamp: ts, MaxTimestamp: ts}, []record.Record{{Value: []byte(value)}})
	if err != nil {
		t.Fatal(err)
	}
	return record.AppendKafka(nil, batch)
}

// txnConn is one transactional producer's raw requests in
// TestTransactionsDelayedRequests: through cl (whose versions decide the
// way, see Txns), to the id's coordinator and the partition's leader.
type txnConn struct {
	t             *testing.T
	cl            *kgo.Client
	id, topic     string
	coord, leader int32
	pid           int64
}

// produce writes value at (epoch, seq) to partition 0 and returns the
// partition's error code.
func (c *txnConn) produce(epoch int16, seq int32, value string) int16 {
	c.t.Helper()
	req := produceRequest(c.topic, -1, 10000, transactionalBatchAt(c.t, c.pid, epoch, seq, value))
	req.TransactionID = &c.id
	res, err := req.RequestWith(c.t.Context(), c.cl.Broker(int(c.leader)))
	require.NoError(c.t, err)
	return res.Topics[0].Partitions[0].ErrorCode
}

// add is AddPartitionsToTxn of partition 0.
func (c *txnConn) add(epoch int16) int16 {
	c.t.Helper()
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = c.id, c.pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = c.topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	res, err := req.RequestWith(c.t.Context(), c.cl.Broker(int(c.coord)))
	require.NoError(c.t, err)
	return res.Topics[0].Partitions[0].ErrorCode
}

// end is EndTxn; it returns the error code and the answered epoch (-1
// below v5).
func (c *txnConn) end(epoch int16, commit bool) (int16, int16) {
	c.t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = c.id, c.pid, epoch, commit
	res, err := req.RequestWith(c.t.Context(), c.cl.Broker(int(c.coord)))
	require.NoError(c.t, err)
	return res.ErrorCode, res.ProducerEpoch
}

// state is the id's DescribeTransactions state.
func (c *txnConn) state() string {
	c.t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{c.id}
	res, err := req.RequestWith(c.t.Context(), c.cl.Broker(int(c.coord)))
	require.NoError(c.t, err)
	require.Zero(c.t, res.TransactionStates[0].ErrorCode)
	return res.TransactionStates[0].State
}

// TestTransactionsDelayedRequests: what KIP-890 defends against, a
// transaction's produce or end delayed (held by the network, or a retry)
// until after the transaction ended, sent as raw requests:
//
//   - With part 2 (Produce v12, EndTxn v5) every end bumps the epoch: the
//     delayed produce and the delayed end carry the old epoch and are
//     fenced, even once the next transaction began; they never reach it.
//   - Before part 2 (Produce v11, EndTxn v4) the epoch stays: the delayed
//     produce is refused (INVALID_TXN_STATE) while the partition is not
//     in an open transaction, and nothing joins a transaction by it. (A
//     delayed end, or a produce delayed until the next transaction added
//     its partition, cannot be told from the next transaction's: that
//     window is the protocol's, docs/kafka.md says so.)
func TestTransactionsDelayedRequests(t *testing.T) {
	t.Parallel()
	cl := client(t)
	adm := kadm.NewClient(cl)
	topic := fmt.Sprintf("txn-delayed-%d", time.Now().UnixNano())
	createTopic(t, adm, topic, 1)
	md, err := adm.Metadata(t.Context(), topic)
	require.NoError(t, err)
	leader := md.Topics[topic].Partitions[0].Leader

	t.Run("KIP-890 part 2", func(t *testing.T) {
		coord, ires := initTxn(t, cl, topic+"-part2")
		c := &txnConn{t: t, cl: cl, id: topic + "-part2", topic: topic, coord: coord, leader: leader, pid: ires.ProducerID}
		e0 := ires.ProducerEpoch
		require.Zero(t, c.produce(e0, 0, "p2-a"), "v12 adds the partition")
		code, e1 := c.end(e0, true)
		require.Zero(t, code)
		require.Equal(t, e0+1, e1)
		// The delayed produce of the ended transaction, before and after
		// the next one began.
		require.Contains(t, []int16{kerr.ProducerFenced.Code, kerr.InvalidProducerEpoch.Code}, c.produce(e0, 1, "p2-late"))
		require.Equal(t, "CompleteCommit", c.state(), "the delayed produce began nothing")
		require.Zero(t, c.produce(e1, 0, "p2-b"))
		require.Contains(t, []int16{kerr.ProducerFenced.Code, kerr.InvalidProducerEpoch.Code}, c.produce(e0, 1, "p2-late"))
		// The delayed end of the first: fenced, the second stays open.
		code, _ = c.end(e0, false)
		require.Contains(t, []int16{kerr.ProducerFenced.Code, kerr.InvalidProducerEpoch.Code}, code)
		require.Equal(t, "Ongoing", c.state())
		code, _ = c.end(e1, true)
		require.Zero(t, code)
	})

	t.Run("before KIP-890 part 2", func(t *testing.T) {
		old := client(t, kgo.MaxVersions(beforeKIP890p2()))
		coord, ires := initTxn(t, old, topic+"-part1")
		c := &txnConn{t: t, cl: old, id: topic + "-part1", topic: topic, coord: coord, leader: leader, pid: ires.ProducerID}
		e := ires.ProducerEpoch
		require.Zero(t, c.add(e))
		require.Zero(t, c.produce(e, 0, "p1-a"))
		code, next := c.end(e, false)
		require.Zero(t, code)
		require.EqualValues(t, -1, next, "no epoch in EndTxn v4")
		// The delayed produce of the aborted transaction: refused, and it
		// began nothing.
		require.Equal(t, kerr.InvalidTxnState.Code, c.produce(e, 1, "p1-late"))
		require.Equal(t, "CompleteAbort", c.state())
		// The next transaction, at the same epoch, its sequences going on.
		require.Zero(t, c.add(e))
		require.Zero(t, c.produce(e, 1, "p1-b"))
		code, _ = c.end(e, true)
		require.Zero(t, code)
	})

	// What a read_committed reader sees: the committed records only.
	var got []string
	for _, r := range readAll(t, topic, kgo.ReadCommitted(), 3) {
		got = append(got, string(r.Value))
	}
	require.ElementsMatch(t, []string{"p2-a", "p2-b", "p1-b"}, got)
}

// TestTransactionsInitProducerIdRecovery: InitProducerId v3+ with the
// producer id and epoch the client has (KIP-360). A producer whose
// transaction its timeout aborted recovers with its old epoch and gets
// the bumped one; the current producer gets its next epoch. A zombie, the
// older incarnation a newer init fenced, cannot take the id back by
// recovering: PRODUCER_FENCED at v4+, INVALID_PRODUCER_EPOCH at v3 (which
// predates the code), and the newer incarnation goes on. On the way: the
// end of the timed-out transaction is TRANSACTION_ABORTABLE, or
// INVALID_PRODUCER_EPOCH to EndTxn before v4; ListTransactions' duration
// filter leaves out a transaction open for less than it.
func TestTransactionsInitProducerIdRecovery(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cl := client(t)
	adm := kadm.NewClient(cl)
	topic := fmt.Sprintf("txn-kip360-%d", time.Now().UnixNano())
	createTopic(t, adm, topic, 1)
	id := topic + "-id"
	coordID, ires := initTxn(t, cl, id)
	coord := cl.Broker(int(coordID))
	pid, epoch := ires.ProducerID, ires.ProducerEpoch

	reinit := func(cl *kgo.Client, epoch int16, timeoutMs int32) *kmsg.InitProducerIDResponse {
		t.Helper()
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = &id, timeoutMs, pid, epoch
		res, err := req.RequestWith(ctx, cl.Broker(int(coordID)))
		require.NoError(t, err)
		return res
	}
	state := func() kmsg.DescribeTransactionsResponseTransactionState {
		t.Helper()
		desc := kmsg.NewPtrDescribeTransactionsRequest()
		desc.TransactionalIDs = []string{id}
		dres, err := desc.RequestWith(ctx, coord)
		require.NoError(t, err)
		return dres.TransactionStates[0]
	}

	// A transaction its timeout (1 s) aborts: the producer recovers with
	// the epoch it had, and gets the epoch the abort bumped to.
	res := reinit(cl, epoch, 1000)
	require.Zero(t, res.ErrorCode, "%v", kerr.ErrorForCode(res.ErrorCode))
	require.Equal(t, pid, res.ProducerID)
	require.Equal(t, epoch+1, res.ProducerEpoch, "the current producer's next epoch")
	epoch = res.ProducerEpoch
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Topics = id, pid, epoch, []kmsg.AddPartitionsToTxnRequestTopic{rt}
	ares, err := add.RequestWith(ctx, coord)
	require.NoError(t, err)
	require.Zero(t, ares.Topics[0].Partitions[0].ErrorCode)
	testenv.Wait(t, 30*time.Second, "the timeout's abort", func() error {
		if st := state(); st.State != "CompleteAbort" {
			return fmt.Errorf("%s at epoch %d", st.State, st.ProducerEpoch)
		}
		return nil
	})
	require.Equal(t, epoch+1, state().ProducerEpoch, "the timeout's abort bumped the epoch")
	// Its end is told the transaction is abortable: TRANSACTION_ABORTABLE
	// from EndTxn v4, INVALID_PRODUCER_EPOCH (which such clients treat
	// as abortable) before.
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, true
	eres, err := end.RequestWith(ctx, coord)
	require.NoError(t, err)
	require.EqualValues(t, 5, eres.Version)
	require.Equal(t, kerr.TransactionAbortable.Code, eres.ErrorCode, "%v", kerr.ErrorForCode(eres.ErrorCode))
	old := kversion.Stable()
	old.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 3)
	eres, err = end.RequestWith(ctx, client(t, kgo.MaxVersions(old)).Broker(int(coordID)))
	require.NoError(t, err)
	require.EqualValues(t, 3, eres.Version)
	require.Equal(t, kerr.InvalidProducerEpoch.Code, eres.ErrorCode, "%v", kerr.ErrorForCode(eres.ErrorCode))
	res = reinit(cl, epoch, 10000)
	require.Zero(t, res.ErrorCode, "%v", kerr.ErrorForCode(res.ErrorCode))
	require.Equal(t, epoch+1, res.ProducerEpoch, "the recovering producer gets the bumped epoch, not a second bump")
	epoch = res.ProducerEpoch

	// A newer incarnation (no producer id) fences it; its recovery is
	// refused at v4+ and v3 alike, each with the code it knows.
	_, ires = initTxn(t, cl, id)
	require.Equal(t, epoch+1, ires.ProducerEpoch)
	res = reinit(cl, epoch, 10000)
	require.EqualValues(t, 5, res.Version)
	require.Equal(t, kerr.ProducerFenced.Code, res.ErrorCode, "%v", kerr.ErrorForCode(res.ErrorCode))
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(kmsg.InitProducerID.Int16(), 3)
	res = reinit(client(t, kgo.MaxVersions(vs)), epoch, 10000)
	require.EqualValues(t, 3, res.Version)
	require.Equal(t, kerr.InvalidProducerEpoch.Code, res.ErrorCode, "%v", kerr.ErrorForCode(res.ErrorCode))
	require.Equal(t, ires.ProducerEpoch, state().ProducerEpoch, "the newer incarnation's epoch stands")

	// The newer incarnation opens a transaction (10 s timeout).
	// ListTransactions' duration filter (v1): open at least that long.
	add.ProducerEpoch = ires.ProducerEpoch
	ares, err = add.RequestWith(ctx, coord)
	require.NoError(t, err)
	require.Zero(t, ares.Topics[0].Partitions[0].ErrorCode)
	list := kmsg.NewPtrListTransactionsRequest()
	list.DurationFilterMillis = 60_000
	lres, err := list.RequestWith(ctx, coord)
	require.NoError(t, err)
	for _, st := range lres.TransactionStates {
		require.NotEqual(t, id, st.TransactionalID, "open for less than a minute, yet listed by a one-minute filter")
	}
	list.DurationFilterMillis = 0
	lres, err = list.RequestWith(ctx, coord)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(lres.TransactionStates, func(st kmsg.ListTransactionsResponseTransactionState) bool {
		return st.TransactionalID == id && st.TransactionState == "Ongoing"
	}), "the open transaction, listed with a filter of 0: %+v", lres.TransactionStates)
}
