package txn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errUnreachable = errors.New("partition leader unreachable")

// TestTxnTransitions drives every transition and refusal from a fresh
// coordinator: each case prepares a transactional id "t", makes one call,
// and checks its error (and class) and the state after it.
func TestTxnTransitions(t *testing.T) {
	t.Parallel()
	type call func(f *fixture, p producer) error
	add := func(tps ...TopicPartition) call {
		return func(f *fixture, p producer) error { return f.add(p, "t", tps...) }
	}
	end := func(commit bool) call {
		return func(f *fixture, p producer) error { _, err := f.end(p, "t", commit); return err }
	}
	addOffsets := func(f *fixture, p producer) error {
		return f.c.AddOffsets(f.ctx, tenant, "t", p.id, p.epoch, "g")
	}
	initP := func(f *fixture, _ producer) error {
		_, _, err := f.c.InitProducer(f.ctx, tenant, "t", 0, nil)
		return err
	}
	// prep returns the producer the call uses.
	fresh := func(t *testing.T, f *fixture) producer { return f.init(t, "t") }
	ongoing := func(t *testing.T, f *fixture) producer {
		p := f.init(t, "t")
		require.NoError(t, f.add(p, "t", tp0))
		return p
	}
	// ended: committed (or aborted); the call uses the epoch of the ended
	// transaction: a late one.
	ended := func(commit bool) func(t *testing.T, f *fixture) producer {
		return func(t *testing.T, f *fixture) producer {
			p := ongoing(t, f)
			_, err := f.end(p, "t", commit)
			require.NoError(t, err)
			return p
		}
	}
	// stuck: an end whose markers cannot be written (Prepare*); the
	// writer stays failing.
	stuck := func(commit bool) func(t *testing.T, f *fixture) producer {
		return func(t *testing.T, f *fixture) producer {
			p := ongoing(t, f)
			f.markers.setFail(errUnreachable)
			_, err := f.end(p, "t", commit)
			require.ErrorIs(t, err, ErrConcurrentTransactions)
			require.ErrorIs(t, err, errUnreachable)
			return p
		}
	}
	reinit := func(t *testing.T, f *fixture) producer { // the old incarnation after a new one
		p := ongoing(t, f)
		f.init(t, "t")
		return p
	}
	timedOut := func(t *testing.T, f *fixture) producer {
		p := ongoing(t, f)
		f.clock.advance(time.Minute + time.Millisecond)
		aborted, err := f.expire()
		require.NoError(t, err)
		require.Equal(t, []Key{{tenant, "t"}}, aborted)
		return p
	}
	bumped := func(prep func(*testing.T, *fixture) producer, d int16) func(*testing.T, *fixture) producer {
		return func(t *testing.T, f *fixture) producer { p := prep(t, f); p.epoch += d; return p }
	}
	for _, tc := range []struct {
		name  string
		prep  func(*testing.T, *fixture) producer
		call  call
		want  error
		class Class
		state State
		epoch int16 // the id's epoch after the call
		parts []TopicPartition
	}{
		{"empty add begins", fresh, add(tp0), nil, ClassOther, StateOngoing, 0, []TopicPartition{tp0}},
		{"empty add offsets begins", fresh, addOffsets, nil, ClassOther, StateOngoing, 0, nil},
		{"ongoing add grows", ongoing, add(tp1, tp0), nil, ClassOther, StateOngoing, 0, []TopicPartition{tp0, tp1}},
		{"ongoing add again", ongoing, add(tp0), nil, ClassOther, StateOngoing, 0, []TopicPartition{tp0}},
		{"ongoing commit", ongoing, end(true), nil, ClassOther, StateCompleteCommit, 1, []TopicPartition{tp0}},
		{"ongoing abort", ongoing, end(false), nil, ClassOther, StateCompleteAbort, 1, []TopicPartition{tp0}},
		{"empty commit bumps", fresh, end(true), nil, ClassOther, StateCompleteCommit, 1, nil},
		{"ongoing future epoch", bumped(ongoing, 1), add(tp1), ErrInvalidProducerEpoch, ClassFatal, StateOngoing, 0, []TopicPartition{tp0}},
		{"ongoing init aborts and bumps twice", ongoing, initP, nil, ClassOther, StateEmpty, 2, nil},
		// KIP-890: the ended transaction's epoch is fenced.
		{"late add after commit", ended(true), add(tp1), ErrProducerFenced, ClassFatal, StateCompleteCommit, 1, []TopicPartition{tp0}},
		{"late add after abort", ended(false), add(tp1), ErrProducerFenced, ClassFatal, StateCompleteAbort, 1, []TopicPartition{tp0}},
		{"opposite end after commit", ended(true), end(false), ErrProducerFenced, ClassFatal, StateCompleteCommit, 1, []TopicPartition{tp0}},
		{"opposite end after abort", ended(false), end(true), ErrProducerFenced, ClassFatal, StateCompleteAbort, 1, []TopicPartition{tp0}},
		{"commit retried", ended(true), end(true), nil, ClassOther, StateCompleteCommit, 1, []TopicPartition{tp0}},
		{"abort retried", ended(false), end(false), nil, ClassOther, StateCompleteAbort, 1, []TopicPartition{tp0}},
		{"next transaction after commit", bumped(ended(true), 1), add(tp1), nil, ClassOther, StateOngoing, 1, []TopicPartition{tp1}},
		{"old incarnation add", reinit, add(tp1), ErrProducerFenced, ClassFatal, StateEmpty, 2, nil},
		{"old incarnation commit", reinit, end(true), ErrProducerFenced, ClassFatal, StateEmpty, 2, nil},
		{"old incarnation abort", reinit, end(false), ErrProducerFenced, ClassFatal, StateEmpty, 2, nil},
		{"stuck commit: late add", stuck(true), add(tp1), ErrProducerFenced, ClassFatal, StatePrepareCommit, 1, []TopicPartition{tp0}},
		{"stuck commit: add at the markers' epoch", bumped(stuck(true), 1), add(tp1), ErrConcurrentTransactions, ClassRetriable, StatePrepareCommit, 1, []TopicPartition{tp0}},
		{"stuck commit: abort", stuck(true), end(false), ErrProducerFenced, ClassFatal, StatePrepareCommit, 1, []TopicPartition{tp0}},
		{"stuck commit: retry still stuck", stuck(true), end(true), ErrConcurrentTransactions, ClassRetriable, StatePrepareCommit, 1, []TopicPartition{tp0}},
		{"stuck abort: init still stuck", stuck(false), initP, ErrConcurrentTransactions, ClassRetriable, StatePrepareAbort, 1, []TopicPartition{tp0}},
		{"timed out: add", timedOut, add(tp1), ErrTransactionAbortable, ClassAbortable, StateCompleteAbort, 1, []TopicPartition{tp0}},
		{"timed out: commit", timedOut, end(true), ErrTransactionAbortable, ClassAbortable, StateCompleteAbort, 1, []TopicPartition{tp0}},
		{"timed out: abort", timedOut, end(false), nil, ClassOther, StateCompleteAbort, 1, []TopicPartition{tp0}},
		{"timed out: next transaction", bumped(timedOut, 1), add(tp1), nil, ClassOther, StateOngoing, 1, []TopicPartition{tp1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			p := tc.prep(t, f)
			err := tc.call(f, p)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
			require.Equal(t, tc.class, ClassOf(err))
			st := f.state(t, "t")
			require.Equal(t, tc.state, st.State)
			require.Equal(t, tc.epoch, st.Epoch)
			require.Equal(t, tc.parts, st.Partitions)
			// What a new coordinator loads is what this one answers.
			require.Equal(t, f.c.Transactions(), f.takeover(t).Transactions())
		})
	}
}

// TestTxnRefusals: requests that name no transaction here, or a bad
// timeout, or reach a coordinator that is not (or no longer) one.
func TestTxnRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	err := f.add(producer{1, 0}, "nobody", tp0)
	require.ErrorIs(t, err, ErrUnknownTransactionalID)
	require.Equal(t, ClassFatal, ClassOf(err))
	_, err = f.end(producer{1, 0}, "nobody", true)
	require.ErrorIs(t, err, ErrUnknownTransactionalID)
	for _, d := range []time.Duration{-time.Second, 16 * time.Minute} {
		_, _, err = f.c.InitProducer(f.ctx, tenant, "t", d, nil)
		require.ErrorIs(t, err, ErrInvalidTimeout)
	}
	_, ok := f.c.Describe(tenant, "t")
	require.False(t, ok)

	// A transactional id is per tenant.
	p := f.init(t, "t")
	require.ErrorIs(t, f.c.AddPartitions(f.ctx, "tenant-b", "t", p.id, p.epoch, []TopicPartition{tp0}), ErrUnknownTransactionalID)

	// Not loaded.
	c := New(openPartition(t, -1), f.config(1))
	_, _, err = c.InitProducer(f.ctx, tenant, "t", 0, nil)
	require.ErrorIs(t, err, ErrNotCoordinator)
	require.Equal(t, ClassRetriable, ClassOf(err))
	require.ErrorIs(t, c.Load(f.ctx), errNotLeader)

	// The leadership moved: writes fail with ErrNotCoordinator and change nothing.
	f.p.resign()
	leo := f.p.LEO()
	err = f.add(p, "t", tp0)
	require.ErrorIs(t, err, ErrNotCoordinator)
	require.Equal(t, StateEmpty, f.state(t, "t").State)
	require.Equal(t, leo, f.p.LEO())
}

// TestTxnMarkers: a commit writes its markers, at the bumped epoch, to
// every partition and group in the transaction before it answers; an abort
// the abort markers; a transaction with nothing in it none.
func TestTxnMarkers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.init(t, "t")
	require.NoError(t, f.add(p, "t", tp0, tp1))
	require.NoError(t, f.add(p, "t", tp2))
	require.NoError(t, f.c.AddOffsets(f.ctx, tenant, "t", p.id, p.epoch, "billing"))
	next, err := f.end(p, "t", true)
	require.NoError(t, err)
	require.Equal(t, producer{p.id, p.epoch + 1}, next)
	commit := []writtenMarker{{true, p.id, p.epoch + 1, 1}}
	offsets := TopicPartition{TopicID: "offsets:" + tenant + "/billing"}
	require.Equal(t, map[TopicPartition][]writtenMarker{tp0: commit, tp1: commit, tp2: commit, offsets: commit}, f.markers.written(t))
	st := f.state(t, "t")
	require.Equal(t, StateCompleteCommit, st.State)
	require.Equal(t, []string{"billing"}, st.Groups)
	require.Equal(t, EndedByClient, st.EndedBy)

	// The next transaction, at the new epoch, aborted.
	require.NoError(t, f.add(next, "t", tp1))
	last, err := f.end(next, "t", false)
	require.NoError(t, err)
	require.Equal(t, producer{p.id, p.epoch + 2}, last)
	w := f.markers.written(t)
	require.Equal(t, []writtenMarker{{true, p.id, 1, 1}, {false, p.id, 2, 1}}, w[tp1])
	require.Equal(t, commit, w[tp0])

	// Nothing in it: no markers.
	calls := f.markers.calls
	_, err = f.end(last, "t", true)
	require.NoError(t, err)
	require.Equal(t, calls, f.markers.calls)
}

// TestTxnWritesOutsideTheLock: the coordinator's state stays readable
// while it writes a record or markers (its main mutex is not held across
// either: a read from inside the write would deadlock otherwise), and while
// the markers are written the transaction is PrepareCommit, already in the
// log.
func TestTxnWritesOutsideTheLock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.init(t, "t")
	require.NoError(t, f.add(p, "t", tp0))
	var duringAppend []State
	f.p.onAppend = func() {
		tx, _ := f.c.Describe(tenant, "t")
		duringAppend = append(duringAppend, tx.State)
	}
	var duringMarkers []State
	f.markers.onWrite = func([]Marker) {
		tx, _ := f.c.Describe(tenant, "t")
		duringMarkers = append(duringMarkers, tx.State)
		_ = f.c.Pending()
		_ = f.c.Transactions()
	}
	_, err := f.end(p, "t", true)
	require.NoError(t, err)
	require.Equal(t, []State{StateOngoing, StatePrepareCommit}, duringAppend, "the Prepare and Complete records")
	require.Equal(t, []State{StatePrepareCommit}, duringMarkers)
}

// TestTxnTakeoverInEachState: the coordinator's broker crashes with the id
// in each state; a coordinator over the same log (replicated to a new
// leader) loads the same state and the same pending markers, finishes an
// end in Prepare* (FinishPending), and the old coordinator is fenced.
func TestTxnTakeoverInEachState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state State
		prep  func(t *testing.T, f *fixture) producer
	}{
		{StateEmpty, func(t *testing.T, f *fixture) producer { return f.init(t, "t") }},
		{StateOngoing, func(t *testing.T, f *fixture) producer {
			p := f.init(t, "t")
			require.NoError(t, f.add(p, "t", tp0, tp1))
			return p
		}},
		{StatePrepareCommit, nil},
		{StatePrepareAbort, nil},
		{StateCompleteCommit, nil},
		{StateCompleteAbort, nil},
	} {
		t.Run(tc.state.String(), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var p producer
			if tc.prep != nil {
				p = tc.prep(t, f)
			} else {
				p = f.init(t, "t")
				require.NoError(t, f.add(p, "t", tp0, tp1))
				commit := tc.state == StatePrepareCommit || tc.state == StateCompleteCommit
				if tc.state.preparing() {
					f.markers.setFail(errUnreachable)
				}
				_, err := f.end(p, "t", commit)
				if tc.state.preparing() {
					require.ErrorIs(t, err, ErrConcurrentTransactions)
				} else {
					require.NoError(t, err)
				}
			}
			// Another id, untouched, and one forgotten.
			other := f.init(t, "other")
			f.init(t, "gone")
			f.clock.advance(25 * time.Hour)
			require.NoError(t, f.add(other, "other", tp2))
			before := f.c.Transactions()
			pendingBefore := f.c.Pending()
			_, ok := before[Key{tenant, "t"}]
			require.True(t, ok)
			require.Equal(t, tc.state, before[Key{tenant, "t"}].State)

			old := f.c
			c := f.takeover(t)
			require.Equal(t, before, c.Transactions(), "the new coordinator loads what the old one answered")
			// The same markers, to be written at the new coordinator's epoch.
			for k, ms := range pendingBefore {
				for i := range ms {
					require.EqualValues(t, 1, ms[i].CoordinatorEpoch)
					ms[i].CoordinatorEpoch = 2
				}
				pendingBefore[k] = ms
			}
			require.Equal(t, pendingBefore, c.Pending())
			if tc.state.preparing() {
				require.Len(t, c.Pending()[Key{tenant, "t"}], 2)
			} else {
				require.Empty(t, c.Pending())
			}

			// The old coordinator is fenced.
			_, _, err := old.InitProducer(f.ctx, tenant, "t", 0, nil)
			require.ErrorIs(t, err, ErrNotCoordinator)

			f.markers.setFail(nil)
			f.c = c
			require.NoError(t, c.FinishPending(f.ctx))
			require.Empty(t, c.Pending())
			st := f.state(t, "t")
			if tc.state.preparing() {
				want := StateCompleteCommit
				if tc.state == StatePrepareAbort {
					want = StateCompleteAbort
				}
				require.Equal(t, want, st.State)
				m := []writtenMarker{{tc.state == StatePrepareCommit, p.id, p.epoch + 1, 2}} // written by the new coordinator
				require.Equal(t, map[TopicPartition][]writtenMarker{tp0: m, tp1: m}, f.markers.written(t))
				// The producer's retry answers the new epoch.
				next, err := f.end(p, "t", tc.state == StatePrepareCommit)
				require.NoError(t, err)
				require.Equal(t, producer{p.id, p.epoch + 1}, next)
			} else {
				require.Equal(t, tc.state, st.State)
			}
			// The new coordinator serves the id: a new incarnation.
			np := f.init(t, "t")
			require.Greater(t, np.epoch, p.epoch)
			require.ErrorIs(t, f.add(p, "t", tp2), ErrProducerFenced)
		})
	}
}

// TestTxnTimeout: Expire aborts only what outlived its timeout, writing
// abort markers at the bumped epoch; the producer is told its transaction
// is abortable, not that it is fenced.
func TestTxnTimeout(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p1 := f.init(t, "slow")
	require.NoError(t, f.add(p1, "slow", tp0))
	pid, epoch, err := f.c.InitProducer(f.ctx, tenant, "patient", 10*time.Minute, nil)
	require.NoError(t, err)
	p2 := producer{pid, epoch}
	require.NoError(t, f.add(p2, "patient", tp1))

	f.clock.advance(time.Minute)
	aborted, err := f.expire()
	require.NoError(t, err)
	require.Empty(t, aborted, "not past the timeout yet")
	f.clock.advance(time.Millisecond)
	aborted, err = f.expire()
	require.NoError(t, err)
	require.Equal(t, []Key{{tenant, "slow"}}, aborted)
	st := f.state(t, "slow")
	require.Equal(t, StateCompleteAbort, st.State)
	require.Equal(t, EndedByTimeout, st.EndedBy)
	require.Equal(t, map[TopicPartition][]writtenMarker{tp0: {{false, p1.id, p1.epoch + 1, 1}}}, f.markers.written(t))
	require.Equal(t, StateOngoing, f.state(t, "patient").State)

	err = f.add(p1, "slow", tp1)
	require.ErrorIs(t, err, ErrTransactionAbortable)
	require.Equal(t, ClassAbortable, ClassOf(err))
	next, err := f.end(p1, "slow", false)
	require.NoError(t, err)
	require.Equal(t, producer{p1.id, p1.epoch + 1}, next)
	require.NoError(t, f.add(next, "slow", tp1))
}

// TestTxnMetrics: finished commits and aborts, timeouts, end and write
// latencies, and the open transactions are counted; an end left unfinished
// is counted when it finishes.
func TestTxnMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m := &Metrics{
		Commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "c"}), Aborts: prometheus.NewCounter(prometheus.CounterOpts{Name: "a"}),
		TimedOut:   prometheus.NewCounter(prometheus.CounterOpts{Name: "t"}),
		EndLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "e"}), WriteLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "w"}),
	}
	cfg := f.config(1)
	cfg.Metrics = m
	f.c = New(f.p, cfg)
	require.NoError(t, f.c.Load(f.ctx))
	p := f.init(t, "t")
	q := f.init(t, "slow")
	require.NoError(t, f.add(p, "t", tp0))
	require.NoError(t, f.add(q, "slow", tp1))
	require.Equal(t, 2, f.c.Open())
	p, err := f.end(p, "t", true)
	require.NoError(t, err)
	require.Equal(t, 1, f.c.Open())
	f.clock.advance(2 * time.Minute)
	f.markers.setFail(errUnreachable)
	_, err = f.expire()
	require.Error(t, err)
	require.Equal(t, 1, f.c.Open(), "the abort is not finished")
	require.EqualValues(t, 1, testutil.ToFloat64(m.TimedOut))
	require.EqualValues(t, 0, testutil.ToFloat64(m.Aborts))
	f.markers.setFail(nil)
	require.NoError(t, f.c.FinishPending(f.ctx))
	require.NoError(t, f.add(p, "t", tp0))
	_, err = f.end(p, "t", false)
	require.NoError(t, err)
	require.Equal(t, 0, f.c.Open())
	require.EqualValues(t, 1, testutil.ToFloat64(m.Commits))
	require.EqualValues(t, 2, testutil.ToFloat64(m.Aborts))
	require.EqualValues(t, 2, samples(t, m.EndLatency), "the two ends that finished in one go")
	require.EqualValues(t, f.p.LEO(), samples(t, m.WriteLatency), "one per record written")
}

// samples is the number of observations of a histogram.
func samples(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, o.(prometheus.Histogram).Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// TestTxnEpochOverflow: an epoch is an int16. An end whose bump reaches
// math.MaxInt16 writes its markers at that epoch and moves the producer to
// a new producer id at epoch 0; InitProducer does so before the epoch
// reaches it. The old producer id is fenced.
func TestTxnEpochOverflow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// The id's state as a long-lived producer left it in the log, loaded
	// by a coordinator.
	k := Key{tenant, "t"}
	load := func(tx *Transaction) {
		_, err := f.p.AppendAcksAll(f.ctx, 1, recordBatch(t, k, tx, f.clock.Now()))
		require.NoError(t, err)
		f.c = New(f.p, f.config(1))
		require.NoError(t, f.c.Load(f.ctx))
	}
	load(&Transaction{ProducerID: 7, Epoch: math.MaxInt16 - 2, Timeout: time.Minute, State: StateEmpty, LastProducerID: -1, LastEpoch: -1})

	p := producer{7, math.MaxInt16 - 2}
	require.NoError(t, f.add(p, "t", tp0))
	p, err := f.end(p, "t", true)
	require.NoError(t, err)
	require.Equal(t, producer{7, math.MaxInt16 - 1}, p, "no overflow yet")
	require.NoError(t, f.add(p, "t", tp0))
	np, err := f.end(p, "t", true)
	require.NoError(t, err)
	require.Equal(t, producer{1001, 0}, np, "a new producer id")
	require.Equal(t, []writtenMarker{{true, 7, math.MaxInt16 - 1, 1}, {true, 7, math.MaxInt16, 1}}, f.markers.written(t)[tp0])
	// A retry of the end answers the same; the old producer id is fenced.
	again, err := f.end(p, "t", true)
	require.NoError(t, err)
	require.Equal(t, np, again)
	require.NoError(t, f.add(np, "t", tp1))
	require.ErrorIs(t, f.add(p, "t", tp1), ErrProducerFenced)
	require.ErrorIs(t, f.add(producer{7, math.MaxInt16}, "t", tp1), ErrProducerFenced)
	require.Equal(t, f.c.Transactions(), f.takeover(t).Transactions())

	// InitProducer at the last usable epoch: a new producer id.
	f = setup(t)
	f.nextPID.Store(1001)
	load(&Transaction{ProducerID: 8, Epoch: math.MaxInt16 - 1, Timeout: time.Minute, State: StateCompleteCommit, LastProducerID: 8, LastEpoch: math.MaxInt16 - 2, EndedBy: EndedByClient})
	require.Equal(t, producer{1002, 0}, f.init(t, "t"))
	require.Equal(t, producer{1002, 1}, f.init(t, "t"))
}

// TestTxnIdleForgotten: Expire forgets an id idle for IdleTimeout with a
// tombstone; a coordinator loading the log later does not know it either,
// and InitProducer gives it a new producer id.
func TestTxnIdleForgotten(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.init(t, "idle")
	busy := f.init(t, "busy")
	require.NoError(t, f.add(busy, "busy", tp0))
	f.clock.advance(24*time.Hour + time.Millisecond)
	require.NoError(t, f.add(busy, "busy", tp1)) // Ongoing: only its timeout applies
	aborted, err := f.expire()
	require.NoError(t, err)
	require.Equal(t, []Key{{tenant, "busy"}}, aborted)
	_, ok := f.c.Describe(tenant, "idle")
	require.False(t, ok)
	kept := read(f.c, func(s *Shard) bool { _, ok := s.txns[Key{tenant, "idle"}]; return ok })
	require.False(t, kept, "a forgotten id takes no memory")
	c := f.takeover(t)
	_, ok = c.Describe(tenant, "idle")
	require.False(t, ok)
	_, ok = c.Describe(tenant, "busy")
	require.True(t, ok)
	f.c = c
	np := f.init(t, "idle")
	require.NotEqual(t, p.id, np.id)
}

// TestTxnConcurrent: partition leaders verifying many partitions of one
// transaction at once, other ids' whole transactions, expiry and reads,
// concurrently (run with -race): every partition added is in the
// transaction and gets its marker, and the log loads to the same state.
func TestTxnConcurrent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.init(t, "t")
	var wg sync.WaitGroup
	const n = 16
	for i := range n {
		wg.Go(func() {
			assert.NoError(t, f.add(p, "t", TopicPartition{"topic-c", int32(i)}))
			assert.NoError(t, f.add(p, "t", TopicPartition{"topic-c", int32(i)}))
		})
	}
	for i := range 4 {
		wg.Go(func() {
			id := fmt.Sprintf("other-%d", i)
			pid, epoch, err := f.c.InitProducer(f.ctx, tenant, id, 0, nil)
			if !assert.NoError(t, err) {
				return
			}
			q := producer{pid, epoch}
			for range 5 {
				assert.NoError(t, f.add(q, id, tp0, tp1))
				q, err = f.end(q, id, i%2 == 0)
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			f.c.RunDue(context.Background())
			assert.NoError(t, f.c.FinishPending(context.Background()))
			_ = f.c.Transactions()
			_ = f.c.Pending()
		}
	})
	wg.Wait()
	require.Len(t, f.state(t, "t").Partitions, n)
	next, err := f.end(p, "t", true)
	require.NoError(t, err)
	w := f.markers.written(t)
	for i := range n {
		require.Equal(t, []writtenMarker{{true, p.id, next.epoch, 1}}, w[TopicPartition{"topic-c", int32(i)}])
	}
	require.Len(t, w[tp0], 20)
	require.Equal(t, f.c.Transactions(), f.takeover(t).Transactions())
}

// TestTxnPartitionOfSpreadsAndSeparatesTenants: ids spread over the
// partitions, the tenant is part of the key, and the mapping is stable.
func TestTxnPartitionOfSpreadsAndSeparatesTenants(t *testing.T) {
	t.Parallel()
	seen := map[int32]int{}
	for i := range 1000 {
		p := PartitionOf("t", fmt.Sprintf("txn-%d", i), 16)
		require.True(t, p >= 0 && p < 16)
		seen[p]++
	}
	require.Len(t, seen, 16)
	differ := 0
	for i := range 100 {
		id := fmt.Sprintf("txn-%d", i)
		require.Equal(t, PartitionOf("a", id, 50), PartitionOf("a", id, 50))
		if PartitionOf("a", id, 50) != PartitionOf("b", id, 50) {
			differ++
		}
	}
	require.Greater(t, differ, 50)
}

// TestTxnForgetWhileWaiting: an InitProducer racing the timer that
// forgets its idle id acts on the id's state as the timer left it, never
// on a removed one (its result would be lost): forgotten first, it starts
// afresh with a new producer id; first, it bumps the epoch and the id is
// no longer idle. Either order, the answer is the state, and the log loads
// to the same states.
func TestTxnForgetWhileWaiting(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 20 {
		id := fmt.Sprintf("idle-%d", i)
		old := f.init(t, id)
		f.clock.advance(24*time.Hour + 2*time.Millisecond)
		type result struct {
			p   producer
			err error
		}
		done := make(chan result)
		go func() {
			pid, epoch, err := f.c.InitProducer(f.ctx, tenant, id, 0, nil)
			done <- result{producer{pid, epoch}, err}
		}()
		f.c.RunDue(f.ctx)
		r := <-done
		require.NoError(t, r.err)
		st := f.state(t, id)
		require.Equal(t, r.p, producer{st.ProducerID, st.Epoch})
		if r.p.id == old.id {
			require.Equal(t, old.epoch+1, r.p.epoch, "bumped: the init came first")
		} else {
			require.Zero(t, r.p.epoch, "forgotten first: a new producer id")
		}
	}
	require.Equal(t, f.c.Transactions(), f.takeover(t).Transactions())
}

// readHook is a partition whose Read calls onRead first.
type readHook struct {
	*logPartition
	onRead func()
}

func (p readHook) Read(offset int64, maxBytes int) ([]byte, error) {
	p.onRead()
	return p.logPartition.Read(offset, maxBytes)
}

// TestTxnReadersDuringLoad: while a takeover's Load reads the log, the
// state's readers (Open, Describe, Transactions: the broker's metrics and
// RPCs) answer at once, with nothing loaded yet, and operations are
// ErrNotCoordinator; after it, the loaded state.
func TestTxnReadersDuringLoad(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.init(t, "t")
	require.NoError(t, f.add(p, "t", tp0))
	p2 := openPartition(t, -1)
	p2.replicate(t, f.p, 2)
	f.p.resign()
	reading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := New(readHook{p2, func() { once.Do(func() { close(reading); <-release }) }}, f.config(2))
	loaded := make(chan error, 1)
	go func() { loaded <- c.Load(f.ctx) }()
	<-reading
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		require.Zero(t, c.Open())
		_, ok := c.Describe(tenant, "t")
		require.False(t, ok)
		require.Empty(t, c.Transactions())
		require.ErrorIs(t, c.AddPartitions(f.ctx, tenant, "t", p.id, p.epoch, []TopicPartition{tp0}), ErrNotCoordinator)
	}()
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the readers waited for the load")
	}
	close(release)
	require.NoError(t, <-loaded)
	require.Equal(t, 1, c.Open())
	tx, ok := c.Describe(tenant, "t")
	require.True(t, ok)
	require.Equal(t, StateOngoing, tx.State)
}

// TestTxnAdmitsNewIDsOnly: InitProducer of a transactional id the
// coordinator does not know asks Config.Admit first and calls its done
// once the id exists; a refusal is returned as is, allocates no producer
// id and creates nothing; InitProducer of a known id is not asked about.
func TestTxnAdmitsNewIDsOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	errFull := errors.New("at max_transactional_ids")
	var asked []string
	var doneKnown []bool
	cfg := f.config(1)
	cfg.Admit = func(_ context.Context, tenantID, id string) (func(), error) {
		asked = append(asked, tenantID+"/"+id)
		if id == "full" {
			return nil, errFull
		}
		return func() {
			_, ok := f.c.Describe(tenantID, id)
			doneKnown = append(doneKnown, ok)
		}, nil
	}
	f.c = New(f.p, cfg)
	require.NoError(t, f.c.Load(f.ctx))

	f.init(t, "job")
	f.init(t, "job") // known: a new epoch, not asked
	require.Equal(t, []string{tenant + "/job"}, asked)
	require.Equal(t, []bool{true}, doneKnown, "done once the id exists")

	pids := f.nextPID.Load()
	_, _, err := f.c.InitProducer(f.ctx, tenant, "full", 0, nil)
	require.ErrorIs(t, err, errFull)
	require.Equal(t, pids, f.nextPID.Load(), "no producer id allocated")
	_, ok := f.c.Describe(tenant, "full")
	require.False(t, ok)
	require.Equal(t, map[string]int{tenant: 1}, f.c.IDsByTenant())
}

// TestTxnBounds: a transaction holds at most its tenant's bounds of
// partitions and of groups: an add that would pass one is refused whole
// (*TooLargeError, ErrTooLarge, abortable) and adds nothing; partitions
// and groups in the transaction already do not count again; another
// tenant has its own bounds; a zero bound is none.
func TestTxnBounds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cfg := f.config(1)
	cfg.Bounds = func(tenantID string) Bounds {
		if tenantID == tenant {
			return Bounds{Partitions: 2, Groups: 1}
		}
		return Bounds{}
	}
	f.c = New(f.p, cfg)
	require.NoError(t, f.c.Load(f.ctx))
	p := f.init(t, "t")

	err := f.add(p, "t", tp0, tp1, tp2)
	var tl *TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, TooLargeError{Tenant: tenant, TransactionalID: "t", What: "partitions", Count: 3, Max: 2}, *tl)
	require.ErrorIs(t, err, ErrTooLarge)
	require.Equal(t, ClassAbortable, ClassOf(err))
	require.Equal(t, StateEmpty, f.state(t, "t").State, "nothing added, no transaction begun")

	require.NoError(t, f.add(p, "t", tp0, tp1))
	require.NoError(t, f.add(p, "t", tp1, tp0), "in it already")
	require.ErrorIs(t, f.add(p, "t", tp2), ErrTooLarge)
	require.NoError(t, f.c.AddOffsets(f.ctx, tenant, "t", p.id, p.epoch, "g1"))
	err = f.c.Add(f.ctx, tenant, "t", p.id, p.epoch, nil, []string{"g1", "g2"})
	require.ErrorAs(t, err, &tl)
	require.Equal(t, "groups", tl.What)
	require.Equal(t, 2, tl.Count)
	st := f.state(t, "t")
	require.Equal(t, []TopicPartition{tp0, tp1}, st.Partitions)
	require.Equal(t, []string{"g1"}, st.Groups)
	_, err = f.end(p, "t", true)
	require.NoError(t, err)

	// Another tenant: unbounded.
	pid, epoch, err := f.c.InitProducer(f.ctx, "tenant-b", "t", 0, nil)
	require.NoError(t, err)
	require.NoError(t, f.c.Add(f.ctx, "tenant-b", "t", pid, epoch, []TopicPartition{tp0, tp1, tp2}, []string{"g1", "g2", "g3"}))
}

// TestTxnEndHoldsNoLockAcrossMarkers (issue 30): while one transaction's
// markers are being written (the write blocked: a partition leader that
// does not answer), other transactional ids on the same coordinator begin,
// grow, commit and start, and the ending id's state is readable
// (PrepareCommit). The same id meanwhile: an add at the ended epoch is
// fenced and one at the markers' epoch is told
// ErrConcurrentTransactions (Kafka's CONCURRENT_TRANSACTIONS), both at
// once; a retry of the end and a new incarnation's InitProducer wait for
// the markers (as before, when they queued behind the end's lock) and
// then answer as the end finished.
func TestTxnEndHoldsNoLockAcrossMarkers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.init(t, "slow")
	require.NoError(t, f.add(p, "slow", tp0))
	release := make(chan struct{})
	blocked := make(chan struct{}, 10)
	f.markers.onWrite = func(ms []Marker) {
		if ms[0].ProducerID == p.id {
			blocked <- struct{}{}
			<-release
		}
	}
	ended := make(chan producer, 1)
	go func() {
		next, err := f.end(p, "slow", true)
		assert.NoError(t, err)
		ended <- next
	}()
	<-blocked // the markers' write has begun and does not return

	for i := range 3 {
		id := fmt.Sprintf("other-%d", i)
		q := f.init(t, id)
		require.NoError(t, f.add(q, id, tp1, tp2))
		next, err := f.end(q, id, true)
		require.NoError(t, err, "another id commits while the markers of %q are blocked", "slow")
		require.Equal(t, producer{q.id, q.epoch + 1}, next)
	}
	st := f.state(t, "slow")
	require.Equal(t, StatePrepareCommit, st.State)

	err := f.add(p, "slow", tp1)
	require.ErrorIs(t, err, ErrProducerFenced, "the ended epoch, at once")
	err = f.add(producer{p.id, p.epoch + 1}, "slow", tp1)
	require.ErrorIs(t, err, ErrConcurrentTransactions, "the markers' epoch, at once")
	require.Equal(t, ClassRetriable, ClassOf(err))

	retried := make(chan producer, 1)
	go func() {
		next, err := f.end(p, "slow", true)
		assert.NoError(t, err)
		retried <- next
	}()
	select {
	case <-ended:
		t.Fatal("the end answered before its markers were written")
	case <-retried:
		t.Fatal("the retry answered before the markers were written")
	default:
	}
	release <- struct{}{}
	want := producer{p.id, p.epoch + 1}
	require.Equal(t, want, <-ended)
	require.Equal(t, want, <-retried, "the retry answers as the end")
	require.Equal(t, []writtenMarker{{true, p.id, p.epoch + 1, 1}}, f.markers.written(t)[tp0])

	// The next end blocks too; a new incarnation waits for it.
	p = want
	require.NoError(t, f.add(p, "slow", tp1))
	go func() {
		next, err := f.end(p, "slow", false)
		assert.NoError(t, err)
		ended <- next
	}()
	<-blocked
	inited := make(chan producer, 1)
	go func() {
		pid, epoch, err := f.c.InitProducer(f.ctx, tenant, "slow", 0, nil)
		assert.NoError(t, err)
		inited <- producer{pid, epoch}
	}()
	select {
	case <-inited:
		t.Fatal("InitProducer answered before the markers were written")
	default:
	}
	close(release)
	require.Equal(t, producer{p.id, p.epoch + 1}, <-ended)
	require.Equal(t, producer{p.id, p.epoch + 2}, <-inited, "the new incarnation after the end")
	w := f.markers.written(t)[tp1]
	require.Equal(t, writtenMarker{false, p.id, p.epoch + 1, 1}, w[len(w)-1])
}
