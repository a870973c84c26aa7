package txns

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// The service without a broker: a view of three brokers (this one is 1),
// the transaction-state partitions over real logs in temp dirs, the other
// brokers and the group coordinators faked at the service's deps.

const (
	self   = int32(1)
	tenant = "t1"
)

// statePartition is a transaction-state partition's replica here: a real
// log that leads at one epoch (acks=all is its own append); deposed, its
// appends answer a NotLeader naming broker 2, as a replica that stepped
// down does.
type statePartition struct {
	*log.Log
	mu    sync.Mutex
	epoch int32 // -1: deposed
}

func (p *statePartition) CheckLeader() error {
	if !p.Leads(1) {
		return &partition.NotLeaderError{TopicID: "ts", Leader: 2, Epoch: 2}
	}
	return nil
}

func (p *statePartition) AppendAcksAll(_ context.Context, epoch int32, batch log.ValidBatch) (int64, error) {
	if !p.Leads(epoch) {
		return 0, &partition.NotLeaderError{TopicID: "ts", Leader: 2, Epoch: 2}
	}
	base, _, err := p.AppendValidated(batch, epoch)
	return base, err
}

func (p *statePartition) Leads(epoch int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch >= 0 && p.epoch == epoch
}

func (p *statePartition) resign() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = -1
}

// peers fakes the other brokers: the markers written at each, and the
// answers of their coordinators to AddToTransaction (in turn; the last
// repeats).
type peers struct {
	mu      sync.Mutex
	markers map[int32][]txn.Marker
	answers []error
	adds    []int32 // the brokers asked
}

func (p *peers) AddToTransaction(_ context.Context, broker int32, authorization string, req AddRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.adds = append(p.adds, broker)
	if authorization != "Bearer client" {
		return errors.New("no credential")
	}
	err := p.answers[0]
	if len(p.answers) > 1 {
		p.answers = p.answers[1:]
	}
	return err
}

func (p *peers) WriteMarkers(_ context.Context, broker int32, markers []txn.Marker) ([]error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.markers[broker] = append(p.markers[broker], markers...)
	return make([]error, len(markers)), nil
}

type fixture struct {
	s      *Service
	view   atomic.Pointer[cluster.View]
	parts  map[int32]*statePartition // by transaction-state partition
	peers  *peers
	groups chan txn.Marker // the group markers written here
	ctx    context.Context // the tenant's principal, with both scopes
}

// setup serves a cluster where this broker leads transaction-state
// partition 0 (of 2) and the offsets partition, broker 2 leads partition 1
// and both partitions of the tenant's topic "orders".
func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{parts: map[int32]*statePartition{}, peers: &peers{markers: map[int32][]txn.Marker{}, answers: []error{nil}}, groups: make(chan txn.Marker, 16)}
	v := cluster.EmptyView()
	v.Loaded = true
	for id := range int32(3) {
		v.Brokers[id+1] = cluster.Node{ID: id + 1, Address: fmt.Sprintf("b%d", id+1)}
	}
	v.AddTopic(&cluster.Topic{TenantID: system.TenantID, ID: "ts", Name: system.TransactionStateTopic, Partitions: []cluster.Partition{
		{TopicID: "ts", Partition: 0, Leader: self, LeaderEpoch: 1}, {TopicID: "ts", Partition: 1, Leader: 2, LeaderEpoch: 1}}})
	v.AddTopic(&cluster.Topic{TenantID: system.TenantID, ID: "os", Name: system.OffsetsTopic, Partitions: []cluster.Partition{{TopicID: "os", Partition: 0, Leader: self, LeaderEpoch: 1}}})
	v.AddTopic(&cluster.Topic{TenantID: tenant, ID: "orders-id", Name: "orders", Partitions: []cluster.Partition{
		{TopicID: "orders-id", Partition: 0, Leader: 2, LeaderEpoch: 1}, {TopicID: "orders-id", Partition: 1, Leader: 2, LeaderEpoch: 1}}})
	f.view.Store(v)
	rt := runtime.NewRuntime()
	t.Cleanup(rt.Close)
	var mu sync.Mutex
	var pids atomic.Int64
	f.s = New(Config{BrokerID: self, MaxTransactionTimeout: 15 * time.Minute}, Deps{
		View:    f.view.Load,
		Replica: func(string, int32) *partition.Replica { return nil },
		Hosted: func() []*txn.Coordinator {
			var out []*txn.Coordinator
			for _, h := range rt.Current() {
				out = append(out, h.(*txn.Coordinator))
			}
			return out
		},
		Host: func(ctx context.Context, tm *cluster.Topic, pm cluster.Partition, mk func(runtime.Partition, int32) *txn.Coordinator) (*txn.Coordinator, error) {
			if pm.Leader != self {
				return nil, f.view.Load().NotLeader(self, pm)
			}
			mu.Lock()
			p := f.parts[pm.Partition]
			if p == nil {
				l, err := log.Open(t.TempDir(), log.Config{SegmentBytes: 1 << 20, Flush: log.FlushOS})
				require.NoError(t, err)
				t.Cleanup(func() { _ = l.Close() })
				p = &statePartition{Log: l, epoch: pm.LeaderEpoch}
				f.parts[pm.Partition] = p
			}
			mu.Unlock()
			return runtime.Host(ctx, rt, runtime.PartitionKey{Topic: tm.Name, Partition: pm.Partition}, pm.LeaderEpoch, runtime.Partition(p),
				func() *txn.Coordinator { return mk(p, pm.LeaderEpoch) })
		},
		AllocateProducerID: func(context.Context) (int64, error) { return pids.Add(1) + 99, nil },
		Peers:              f.peers,
		GroupMarker: func(_ context.Context, m txn.Marker) error {
			f.groups <- m
			return nil
		},
	})
	f.ctx = tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: tenant, Scopes: []string{tenants.ScopeProduce, tenants.ScopeConsume}})
	return f
}

// idAt returns a transactional id of the tenant on transaction-state
// partition p (of 2).
func idAt(t *testing.T, p int32) string {
	t.Helper()
	for i := 0; ; i++ {
		if id := fmt.Sprintf("job-%d", i); txn.PartitionOf(tenant, id, 2) == p {
			return id
		}
	}
}

// TestTxnsCommitWritesMarkersAtLeaders: a transaction over two partitions
// led by broker 2 and a group coordinated here commits once every marker
// is written, each where its partition's leader is (broker 2's through
// the peers, the group's through its coordinator here), and answers the
// bumped epoch; Describe shows the partitions by name.
func TestTxnsCommitWritesMarkersAtLeaders(t *testing.T) {
	t.Parallel()
	f := setup(t)
	id := idAt(t, 0)
	p, err := f.s.InitProducer(f.ctx, InitRequest{TenantID: tenant, TransactionalID: id})
	require.NoError(t, err)
	require.Equal(t, Producer{ID: 100, Epoch: 0}, p)
	require.NoError(t, f.s.AddPartitions(f.ctx, AddRequest{TenantID: tenant, TransactionalID: id, ProducerID: p.ID, ProducerEpoch: int32(p.Epoch),
		Topics: []TopicPartitions{{Topic: "orders", Partitions: []int32{1, 0}}}, Groups: []string{"g"}}))
	d, err := f.s.Describe(f.ctx, tenant, id)
	require.NoError(t, err)
	require.Equal(t, txn.StateOngoing, d.State)
	require.Equal(t, []TopicPartitions{{Topic: "orders", Partitions: []int32{0, 1}}}, d.Topics)
	require.Equal(t, []string{"g"}, d.Groups)
	require.Equal(t, self, d.CoordinatorID)
	require.Equal(t, map[string]int{tenant: 1}, f.s.IDsByTenant())

	end, err := f.s.EndTransaction(f.ctx, EndRequest{TenantID: tenant, TransactionalID: id, ProducerID: p.ID, ProducerEpoch: int32(p.Epoch), Commit: true})
	require.NoError(t, err)
	require.Equal(t, Producer{ID: 100, Epoch: 1}, end)
	marker := func(m txn.Marker) string {
		return fmt.Sprintf("%s/%d %q commit=%v pid=%d epoch=%d", m.Partition.TopicID, m.Partition.Partition, m.Group, m.Commit, m.ProducerID, m.ProducerEpoch)
	}
	var at2 []string
	for _, m := range f.peers.markers[2] {
		at2 = append(at2, marker(m))
	}
	slices.Sort(at2)
	require.Equal(t, []string{`orders-id/0 "" commit=true pid=100 epoch=1`, `orders-id/1 "" commit=true pid=100 epoch=1`}, at2)
	require.Equal(t, `/0 "g" commit=true pid=100 epoch=1`, marker(<-f.groups))
	d, err = f.s.Describe(f.ctx, tenant, id)
	require.NoError(t, err)
	require.Equal(t, txn.StateCompleteCommit, d.State)

	all, err := f.s.ListAll(f.ctx, "", "")
	require.NoError(t, err)
	require.Len(t, all, 1)
	mine, err := f.s.ListLocal(f.ctx, "another-tenant")
	require.NoError(t, err)
	require.Empty(t, mine)
}

// TestTxnsOnlyTheLookupNamesTheCoordinator: an id coordinated on another
// broker is answered the lookup's NotLeader (outermost: the Connect
// adapter forwards it, a Kafka client is told NOT_COORDINATOR); a
// coordinator deposed since it was found answers NotCoordinator (find the
// coordinator again), never as the lookup does.
func TestTxnsOnlyTheLookupNamesTheCoordinator(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.s.InitProducer(f.ctx, InitRequest{TenantID: tenant, TransactionalID: idAt(t, 1)})
	nl, ok := derr.Outermost(err, nil).(*partition.NotLeaderError)
	require.True(t, ok, "%v", err)
	require.Equal(t, int32(2), nl.Leader)
	c, err := f.s.FindCoordinator(f.ctx, tenant, idAt(t, 1))
	require.NoError(t, err)
	require.Equal(t, Coordinator{BrokerID: 2, Address: "b2"}, c)

	id := idAt(t, 0)
	p, err := f.s.InitProducer(f.ctx, InitRequest{TenantID: tenant, TransactionalID: id})
	require.NoError(t, err)
	f.parts[0].resign()
	err = f.s.AddPartitions(f.ctx, AddRequest{TenantID: tenant, TransactionalID: id, ProducerID: p.ID, ProducerEpoch: int32(p.Epoch), Groups: []string{"g"}})
	require.ErrorIs(t, err, derr.NotCoordinator)
	_, lookup := derr.Outermost(err, nil).(*partition.NotLeaderError)
	require.False(t, lookup, "%v", err)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(connecterr.ToConnect(err)))
}

// TestTxnsRefusesBadRequests: each malformed request is refused with the
// message a client reads, before anything is written.
func TestTxnsRefusesBadRequests(t *testing.T) {
	t.Parallel()
	f := setup(t)
	id := idAt(t, 0)
	p, err := f.s.InitProducer(f.ctx, InitRequest{TenantID: tenant, TransactionalID: id})
	require.NoError(t, err)
	add := func(mod func(r *AddRequest)) error {
		r := AddRequest{TenantID: tenant, TransactionalID: id, ProducerID: p.ID, ProducerEpoch: int32(p.Epoch)}
		mod(&r)
		return f.s.AddPartitions(f.ctx, r)
	}
	produceOnly := tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: tenant, Scopes: []string{tenants.ScopeProduce}})
	for _, c := range []struct {
		name string
		err  error
		kind derr.Kind
		msg  string
	}{
		{"empty id", f.s.AddPartitions(f.ctx, AddRequest{TenantID: tenant}), derr.InvalidRequest, "transactional_id: must not be empty"},
		{"unprintable id", func() error {
			_, err := f.s.InitProducer(f.ctx, InitRequest{TenantID: tenant, TransactionalID: "a\x00b"})
			return err
		}(), derr.InvalidRequest, `transactional_id: character '\x00' at byte 1 is not printable`},
		{"timeout over the cap", func() error {
			_, err := f.s.InitProducer(f.ctx, InitRequest{TenantID: tenant, TransactionalID: id, TimeoutMs: 16 * 60 * 1000})
			return err
		}(), derr.InvalidTransactionTimeout, "transaction_timeout_ms: must be between 1 and 900000 (--max-transaction-timeout 15m0s), or 0 for the default (60 s, at most the maximum); got 960000"},
		{"negative epoch", add(func(r *AddRequest) { r.ProducerEpoch = -1 }), derr.InvalidRequest, "producer_epoch: must be between 0 and 32766; got -1"},
		{"unknown topic", add(func(r *AddRequest) { r.Topics = []TopicPartitions{{Topic: "nope", Partitions: []int32{0}}} }), derr.UnknownTopicOrPartition, `topics[0]: topic "nope" not found`},
		{"unknown partition", add(func(r *AddRequest) { r.Topics = []TopicPartitions{{Topic: "orders", Partitions: []int32{2}}} }), derr.UnknownTopicOrPartition, `topics[0]: topic "orders" partition 2 not found`},
		{"no partitions", add(func(r *AddRequest) { r.Topics = []TopicPartitions{{Topic: "orders"}} }), derr.InvalidRequest, "topics[0]: partitions must not be empty"},
		{"empty group", add(func(r *AddRequest) { r.Groups = []string{"g", ""} }), derr.InvalidRequest, "groups[1]: group: must not be empty"},
		{"nothing", add(func(r *AddRequest) {}), derr.InvalidRequest, "topics or groups: at least one must be set"},
		{"groups without consume", f.s.AddPartitions(produceOnly, AddRequest{TenantID: tenant, TransactionalID: id, Groups: []string{"g"}}), derr.GroupAuthorizationFailed, `groups: adding a group's offsets to a transaction needs the "consume" scope`},
		{"unknown describe", func() error { _, err := f.s.Describe(f.ctx, tenant, "never-seen"); return err }(), derr.TransactionalIDNotFound, `transactional id "never-seen" not found`},
	} {
		require.ErrorIs(t, c.err, c.kind, c.name)
		require.Contains(t, c.err.Error(), c.msg, c.name)
	}
	d, err := f.s.Describe(f.ctx, tenant, id)
	require.NoError(t, err)
	require.Equal(t, txn.StateEmpty, d.State, "nothing was added")
}

// TestTxnsVerifyAtARemoteCoordinator: a verification of an id another
// broker coordinates asks that broker with the client's credential,
// follows one NotLeader answer, and passes the coordinator's refusal
// through as it answered it; a second move, or a NotLeader naming this
// broker, is CoordinatorNotAvailable without a NotLeader.
func TestTxnsVerifyAtARemoteCoordinator(t *testing.T) {
	t.Parallel()
	movedTo := func(leader int32) error {
		return connecterr.Relay(connecterr.ToConnect(&partition.NotLeaderError{TopicID: "ts", Partition: 1, Leader: leader, Epoch: 3, Address: fmt.Sprintf("b%d", leader)}))
	}
	fenced := connecterr.Relay(connecterr.ToConnect(txnError(txn.ErrProducerFenced)))
	v := Verification{TenantID: tenant, TransactionalID: idAt(t, 1), ProducerID: 7, Authorization: "Bearer client"}
	for _, c := range []struct {
		name    string
		answers []error
		asked   []int32
		want    error // nil: verified
	}{
		{"verified", []error{nil}, []int32{2}, nil},
		{"moved once", []error{movedTo(3), nil}, []int32{2, 3}, nil},
		{"moved twice", []error{movedTo(3), movedTo(2)}, []int32{2, 3}, derr.CoordinatorNotAvailable},
		{"moved here", []error{movedTo(self)}, []int32{2}, derr.CoordinatorNotAvailable},
		{"refused", []error{fenced}, []int32{2}, derr.ProducerFenced},
	} {
		f := setup(t)
		f.peers.answers = c.answers
		err := f.s.VerifyPartition(f.ctx, v, "orders-id", 0)
		require.Equal(t, c.asked, f.peers.adds, c.name)
		if c.want == nil {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorIs(t, err, c.want, c.name)
		var nl *partition.NotLeaderError
		require.False(t, errors.As(err, &nl), "%s: %v", c.name, err)
	}
	f := setup(t)
	require.Same(t, fenced, func() error { f.peers.answers = []error{fenced}; return f.s.VerifyGroup(f.ctx, v, "g") }(), "a refusal is answered as the coordinator gave it")
	v.Authorization = ""
	require.ErrorIs(t, f.s.VerifyPartition(f.ctx, v, "orders-id", 0), derr.CoordinatorNotAvailable, "a broker not asked")
	require.ErrorIs(t, f.s.VerifyPartition(f.ctx, v, "no-such-topic", 0), derr.UnknownTopicOrPartition)
}
