package partition

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition/fetchsession"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// TestPartitionReplicationModel is dataplane/replica's model test
// (TestReplicaModel) run on the code brokers run: three replicas of the
// type brokers run (Replica) on real logs, one per broker, driven through
// their own paths (Produce, a round of the follower broker's fetcher → the
// leader broker's fetch Sessions → applyFetch, Update for every assignment, MaybeAlterISR
// against a control plane that applies AlterPartition by compare-and-set) with random produces (acks=1
// and acks=all, to the leader and sometimes to a zombie or a follower),
// partial fetches, crashes with a lost uncommitted tail and a stale HW
// checkpoint, isolation, and elections from the ISR. After every step it
// checks the invariants of dataplane/replica's doc (HW ≤ LEO of every ISR
// member, records below a leader's HW identical on every ISR member and
// never changed, acknowledged records on every ISR member, a follower's HW
// at most its LEO, no refusal to truncate below the HW after clean
// elections), and at the end that the replicas converge, every produce is
// answered and every acknowledged record is there. The replica keeps no
// replication state of its own: a replica that grew its own truncation or
// HW rule again would have to pass this too (truncating to the HW on a
// divergence, the pre-KIP-101 rule, loses acknowledged records here;
// ignoring a divergence never converges).
func TestPartitionReplicationModel(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 24; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			newBrokerModel(t, seed).run(150)
		})
	}
}

type modelEntry struct {
	epoch int32
	val   string
}

func (e modelEntry) String() string { return fmt.Sprintf("%d:%s", e.epoch, e.val) }

type modelNode struct {
	id    int32
	h     *Host
	dir   string       // the replica's directory
	epoch atomic.Int64 // the broker epoch
	p     *Replica     // nil while down
	// sessions serve the followers' fetch sessions while n leads; a
	// restart loses them.
	sessions *fetchsession.Sessions
	lastLog  []modelEntry // the log as it was when the node went down
	isolated bool
	// savedHW is the HW the broker's checkpoint holds (hwSaved: any).
	savedHW int64
	hwSaved bool
}

type modelProduce struct {
	node *modelNode
	val  string
	done chan produceOutcome
}

type produceOutcome struct {
	res ProduceResult
	err error
}

type brokerModel struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	nodes    []*modelNode
	cfg      TopicConfig
	dead     context.Context // a cancelled context: update starts no fetch loop
	trace    strings.Builder
	nextVal  int
	inflight []*modelProduce

	// The control plane's view of the partition.
	leader         int32
	leaderEpoch    int32
	partitionEpoch int32
	isr            []int32
	brokerEpochs   map[int32]int64

	acked     map[int64]string // acks=all records acknowledged
	committed map[int64]modelEntry
	commitEnd int64
	seenHW    map[*replica.Leader]int64
}

func newBrokerModel(t *testing.T, seed uint64) *brokerModel {
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	m := &brokerModel{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0xb40c)), dead: dead,
		cfg:    TopicConfig{MinISR: int32(1 + seed%2)},
		leader: 1, leaderEpoch: 1, partitionEpoch: 1, isr: []int32{1, 2, 3}, brokerEpochs: map[int32]int64{},
		acked: map[int64]string{}, committed: map[int64]modelEntry{}, seenHW: map[*replica.Leader]int64{}}
	for id := int32(1); id <= 3; id++ {
		n := &modelNode{id: id, dir: t.TempDir()}
		h := newTestHost(t)
		h.ID = id
		h.BrokerEpoch = n.epoch.Load
		h.Flush = log.FlushOS             // a crash here loses only what restart truncates, never the page cache
		h.ReplicaLagTimeMax = time.Second // shrinks happen; the invariants must hold anyway
		h.AlterPartition = alterVia(modelControlPlane{m: m}.AlterPartition)
		n.h = h
		n.epoch.Store(1)
		m.brokerEpochs[id] = 1
		m.nodes = append(m.nodes, n)
		m.open(n)
	}
	t.Cleanup(func() {
		for _, n := range m.nodes {
			if n.p != nil {
				n.p.Stop()
				_ = n.p.log.Close()
			}
		}
	})
	m.assignAll()
	return m
}

func (m *brokerModel) node(id int32) *modelNode { return m.nodes[id-1] }

func (m *brokerModel) logf(format string, args ...any) {
	fmt.Fprintf(&m.trace, format+"\n", args...)
}

func (m *brokerModel) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("seed %d: %s\ntrace:\n%s", m.seed, fmt.Sprintf(format, args...), m.trace.String())
}

func (m *brokerModel) open(n *modelNode) {
	p, err := Open(n.h, Spec{TenantID: "t1", TopicID: modelTopic, Partition: 0, Dir: n.dir, Config: m.cfg, HW: n.savedHW, HWKnown: n.hwSaved})
	if err != nil {
		m.fatalf("open replica on %d: %v", n.id, err)
	}
	n.p = p
	n.sessions = NewSessions(func(topicID string, partition int32) *Replica {
		if topicID != modelTopic || partition != 0 {
			return nil
		}
		return n.p
	}, fetchsession.Config{})
}

func (m *brokerModel) assignment() Assignment {
	return Assignment{Replicas: []int32{1, 2, 3}, Leader: m.leader, LeaderEpoch: m.leaderEpoch,
		ISR: slices.Clone(m.isr), PartitionEpoch: m.partitionEpoch}
}

// assign delivers the control plane's current assignment to n, as the
// assignment stream would.
func (m *brokerModel) assign(n *modelNode) {
	if n.p != nil && !n.isolated {
		n.p.Update(m.dead, m.assignment(), m.cfg)
	}
}

func (m *brokerModel) assignAll() {
	for _, n := range m.nodes {
		m.assign(n)
	}
}

// modelTopic is the id of the model's topic.
const modelTopic = "topic-m"

// modelControlPlane answers AlterPartition like the controller: leader
// epoch, then partition epoch, then the broker epochs of added replicas,
// each a compare-and-set; a refusal carries the current state.
type modelControlPlane struct {
	m *brokerModel
}

func (c modelControlPlane) AlterPartition(_ context.Context, req *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error) {
	m, r := c.m, req.Msg
	if m.node(r.GetBrokerId()).isolated {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("control plane unreachable"))
	}
	refuse := func(format string, args ...any) *connect.Error {
		ce := connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(format, args...))
		if d, err := connect.NewErrorDetail(m.wireAssignment()); err == nil {
			ce.AddDetail(d)
		}
		return ce
	}
	switch {
	case r.GetLeaderEpoch() != m.leaderEpoch || r.GetBrokerId() != m.leader:
		return nil, refuse("fenced leader epoch %d (current %d)", r.GetLeaderEpoch(), m.leaderEpoch)
	case r.GetPartitionEpoch() != m.partitionEpoch:
		ce := refuse("stale partition epoch %d (current %d)", r.GetPartitionEpoch(), m.partitionEpoch)
		if d, err := connect.NewErrorDetail(&sluicev1.StalePartitionEpoch{PartitionEpoch: r.GetPartitionEpoch(), CurrentPartitionEpoch: m.partitionEpoch}); err == nil {
			ce.AddDetail(d)
		}
		return nil, ce
	}
	for _, be := range r.GetAddedBrokerEpochs() {
		if n := m.node(be.GetBrokerId()); n.p == nil || m.brokerEpochs[n.id] != be.GetBrokerEpoch() {
			return nil, refuse("stale broker epoch %d of broker %d", be.GetBrokerEpoch(), be.GetBrokerId())
		}
	}
	m.setISR(r.GetNewIsr())
	m.logf("controller: isr=%v partition-epoch=%d", m.isr, m.partitionEpoch)
	return connect.NewResponse(&sluicev1.AlterPartitionResponse{Partition: m.wireAssignment()}), nil
}

func (m *brokerModel) wireAssignment() *sluicev1.PartitionAssignment {
	return &sluicev1.PartitionAssignment{TopicId: modelTopic, Partition: 0, Replicas: []int32{1, 2, 3}, Leader: m.leader,
		LeaderEpoch: m.leaderEpoch, Isr: slices.Clone(m.isr), PartitionEpoch: m.partitionEpoch}
}

func (m *brokerModel) setISR(isr []int32) {
	m.isr = slices.Sorted(slices.Values(isr))
	m.partitionEpoch++
}

func (m *brokerModel) run(steps int) {
	for range steps {
		n := m.nodes[m.rng.IntN(len(m.nodes))]
		switch r := m.rng.IntN(100); {
		case r < 25:
			target := m.node(m.leader)
			if m.rng.IntN(5) == 0 {
				target = n // sometimes a zombie or a follower
			}
			m.produce(target, m.rng.IntN(3) > 0)
		case r < 80:
			m.fetch(n)
		case r < 89:
			m.tick()
		case r < 91:
			m.crash(n)
		case r < 95:
			m.restart(n)
		case r < 97:
			m.elect()
		case r < 98:
			if n.p != nil && !n.isolated {
				n.isolated = true
				m.logf("%d: isolated", n.id)
			}
		default:
			m.heal(n)
		}
		m.check()
	}
	m.converge()
}

func (m *brokerModel) produce(n *modelNode, acksAll bool) {
	if n.p == nil {
		return
	}
	m.nextVal++
	val := fmt.Sprintf("v%d", m.nextVal)
	b, err := log.EncodeLeaderBatch(nil, record.BatchHeader{ProducerID: -1}, []record.Record{{Value: []byte(val)}})
	require.NoError(m.t, err)
	if !acksAll {
		res, err := n.p.Produce(context.Background(), []log.ValidBatch{b}, sluicev1.Acks_ACKS_LEADER, time.Minute, nil)
		m.logf("%d: produce %s acks=1 -> base=%d err=%v", n.id, val, res.Base, err)
		return
	}
	p := n.p
	p.mu.Lock()
	changed := p.hwCh // Produce closes it once it appended and registered its wait
	p.mu.Unlock()
	mp := &modelProduce{node: n, val: val, done: make(chan produceOutcome, 1)}
	go func() {
		res, err := p.Produce(context.Background(), []log.ValidBatch{b}, sluicev1.Acks_ACKS_ALL, time.Minute, nil)
		mp.done <- produceOutcome{res, err}
	}()
	select {
	case <-changed:
	case out := <-mp.done: // refused
		mp.done <- out
	case <-time.After(10 * time.Second):
		m.fatalf("%d: the acks=all produce of %s neither appended nor ended", n.id, val)
	}
	m.logf("%d: produce %s acks=all", n.id, val)
	m.inflight = append(m.inflight, mp)
}

// fetch runs one round of n's fetcher of its leader (the code brokers
// run: the fetcher's session request, the leader's Sessions, the answers
// applied), unless a link is cut. A leader that restarted lost its
// sessions, so the fetcher starts a new one.
func (m *brokerModel) fetch(n *modelNode) {
	if n.p == nil || n.isolated {
		return
	}
	n.p.mu.Lock()
	fol := n.p.fol
	n.p.mu.Unlock()
	if fol == nil {
		return
	}
	ln := m.node(fol.Leader())
	f := n.h.fetcherSet().Of(ln.id)
	if f == nil {
		m.fatalf("%d: follows %d without a fetcher", n.id, ln.id)
	}
	send := func(ctx context.Context, req *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
		if ln.p == nil || ln.isolated {
			return nil, derr.New(derr.Unavailable, "leader unreachable")
		}
		return ln.sessions.Fetch(ctx, req)
	}
	before := n.p.log.LEO()
	// Sometimes a partial fetch.
	r := f.Round(context.Background(), send, 0, int32(1+m.rng.IntN(400)), int32(1+m.rng.IntN(200)))
	m.logf("%d: fetch from %d: leo %d -> %d hw=%d err=%v apply-err=%v", n.id, ln.id, before, n.p.log.LEO(), n.p.HighWatermark(), r.Err, r.ApplyErr)
	if errors.Is(r.ApplyErr, replica.ErrTruncateBelowHW) {
		m.fatalf("%d: asked to truncate committed records after clean elections: %v", n.id, r.ApplyErr)
	}
	if r.ApplyErr != nil {
		m.fatalf("%d: apply fetch: %v", n.id, r.ApplyErr)
	}
}

// tick runs every up leader's ISR step (MaybeAlterISR) against the control
// plane, then lets the assignment stream deliver the result.
func (m *brokerModel) tick() {
	for _, n := range m.nodes {
		if n.p != nil {
			n.p.MaybeAlterISR(context.Background())
		}
	}
	m.assignAll()
}

func (m *brokerModel) crash(n *modelNode) {
	if n.p == nil {
		return
	}
	if m.rng.IntN(2) == 0 {
		n.savedHW, n.hwSaved = n.p.HighWatermark(), true // the checkpoint loop ran lately
	}
	n.lastLog = m.entries(n.p)
	n.p.Stop()
	require.NoError(m.t, n.p.log.Close())
	n.p, n.isolated = nil, false
	m.logf("%d: crashed", n.id)
}

// restart reopens a crashed node's partition, losing part of its tail that
// was never committed (an unsynced tail: with flush=always nothing
// acknowledged is lost), under a new broker epoch. A restarted leader is replaced
// by an election, as the controller treats a re-registration.
func (m *brokerModel) restart(n *modelNode) {
	if n.p != nil {
		return
	}
	n.epoch.Add(1)
	m.brokerEpochs[n.id] = n.epoch.Load()
	m.open(n)
	if leo := n.p.log.LEO(); leo > m.commitEnd {
		to := leo - m.rng.Int64N(leo-m.commitEnd+1)
		require.NoError(m.t, n.p.log.TruncateTo(to))
		n.p.mu.Lock()
		n.p.roleHW = min(n.p.roleHW, n.p.log.LEO())
		n.p.mu.Unlock()
	}
	m.logf("%d: restarted broker-epoch=%d leo=%d", n.id, m.brokerEpochs[n.id], n.p.log.LEO())
	if m.leader == n.id {
		m.electFrom(m.isr)
		return
	}
	m.assign(n)
}

// elect moves leadership to a live ISR member reachable by the control
// plane, with a new leader epoch; an unreachable old leader leaves the ISR.
func (m *brokerModel) elect() {
	m.electFrom(m.isr)
}

func (m *brokerModel) electFrom(isr []int32) {
	var cands []int32
	for _, id := range isr {
		if n := m.node(id); n.p != nil && !n.isolated {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		m.logf("controller: no live ISR member to elect")
		return
	}
	next := cands[m.rng.IntN(len(cands))]
	newISR := slices.Clone(m.isr)
	if old := m.node(m.leader); old.id != next && (old.p == nil || old.isolated) && len(newISR) > 1 {
		newISR = slices.DeleteFunc(newISR, func(id int32) bool { return id == old.id })
	}
	m.leader = next
	m.leaderEpoch++
	m.setISR(newISR)
	m.logf("controller: leader=%d epoch=%d isr=%v partition-epoch=%d", m.leader, m.leaderEpoch, m.isr, m.partitionEpoch)
	m.assignAll()
}

func (m *brokerModel) heal(n *modelNode) {
	if n.isolated {
		n.isolated = false
		m.logf("%d: healed", n.id)
		m.assign(n)
	}
}

// entries reads a partition's log as (leader epoch, value) pairs.
func (m *brokerModel) entries(p *Replica) []modelEntry {
	m.t.Helper()
	var out []modelEntry
	for off := p.log.LogStartOffset(); off < p.log.LEO(); {
		data, err := p.log.Read(off, 1<<20)
		require.NoError(m.t, err)
		for rest := data; len(rest) > 0; {
			b, r, err := record.ReadBatch(rest)
			require.NoError(m.t, err)
			it, err := b.Records()
			require.NoError(m.t, err)
			for it.Next() {
				out = append(out, modelEntry{epoch: b.LeaderEpoch(), val: string(it.Record().Value)})
			}
			require.NoError(m.t, it.Err())
			off = b.LastOffset() + 1
			rest = r
		}
	}
	return out
}

func (m *brokerModel) logOf(n *modelNode) []modelEntry {
	if n.p == nil {
		return n.lastLog
	}
	return m.entries(n.p)
}

// check verifies the invariants of dataplane/replica's doc on the replicas.
func (m *brokerModel) check() {
	m.t.Helper()
	m.reap()
	for _, n := range m.nodes {
		if n.p == nil {
			continue
		}
		p := n.p
		p.mu.Lock()
		lead, fol, leo := p.lead, p.fol, p.log.LEO()
		var hw int64
		var isr []int32
		if lead != nil && !lead.Resigned() {
			hw, isr = lead.HW(), lead.ISR()
		}
		folHW := int64(-1)
		if fol != nil {
			folHW = fol.HW()
		}
		p.mu.Unlock()
		if folHW > leo {
			m.fatalf("follower %d HW %d above its LEO %d", n.id, folHW, leo)
		}
		if lead == nil || lead.Resigned() {
			continue
		}
		if prev, ok := m.seenHW[lead]; ok && hw < prev {
			m.fatalf("leader %d HW went back %d -> %d", n.id, prev, hw)
		}
		m.seenHW[lead] = hw
		if hw > leo {
			m.fatalf("leader %d HW %d above its LEO %d", n.id, hw, leo)
		}
		mine := m.entries(p)
		for _, id := range isr {
			other := m.logOf(m.node(id))
			if int64(len(other)) < hw {
				m.fatalf("leader %d HW %d above LEO %d of ISR member %d", n.id, hw, len(other), id)
			}
			for o := range hw {
				if other[o] != mine[o] {
					m.fatalf("ISR member %d has %v at %d below HW %d, leader %d has %v", id, other[o], o, hw, n.id, mine[o])
				}
			}
		}
		for o := range hw {
			if e, ok := m.committed[o]; ok && e != mine[o] {
				m.fatalf("offset %d committed as %v, leader %d has %v below its HW", o, e, n.id, mine[o])
			}
			m.committed[o] = mine[o]
		}
		m.commitEnd = max(m.commitEnd, hw)
	}
	for o, v := range m.acked {
		for _, id := range m.isr {
			l := m.logOf(m.node(id))
			if o >= int64(len(l)) || l[o].val != v {
				m.fatalf("acknowledged %s at %d missing on ISR member %d (log %v)", v, o, id, l)
			}
		}
	}
}

// reap records the acks=all produces that ended.
func (m *brokerModel) reap() {
	m.inflight = slices.DeleteFunc(m.inflight, func(mp *modelProduce) bool {
		select {
		case out := <-mp.done:
			m.logf("%d: ack %s base=%d err=%v", mp.node.id, mp.val, out.res.Base, out.err)
			if out.err == nil {
				m.acked[out.res.Base] = mp.val
			}
			return true
		default:
			return false
		}
	})
}

// converge heals everything and requires the replicas to become identical,
// all in the ISR, with every acknowledged record and every produce answered.
func (m *brokerModel) converge() {
	for _, n := range m.nodes {
		m.heal(n)
		m.restart(n)
	}
	if l := m.node(m.leader); l.p == nil {
		m.elect()
	}
	m.assignAll()
	err := testenv.Retry(30*time.Second, func() error {
		for _, n := range m.nodes {
			m.fetch(n)
		}
		m.tick()
		m.check()
		lp := m.node(m.leader).p
		lp.mu.Lock()
		lead := lp.lead
		done := lead != nil && len(lead.ISR()) == 3 && lead.HW() == lead.LEO()
		lp.mu.Unlock()
		if !done {
			return errors.New("not converged")
		}
		want := m.entries(lp)
		for _, n := range m.nodes {
			if got := m.entries(n.p); !slices.Equal(got, want) {
				return fmt.Errorf("broker %d log %v, leader's %v", n.id, got, want)
			}
		}
		if len(m.inflight) > 0 {
			return fmt.Errorf("%d acks=all produces unanswered", len(m.inflight))
		}
		return nil
	})
	if err != nil {
		m.fatalf("no convergence: %v", err)
	}
	want := m.entries(m.node(m.leader).p)
	for o, v := range m.acked {
		if o >= int64(len(want)) || want[o].val != v {
			m.fatalf("acknowledged %s at %d lost", v, o)
		}
	}
}
