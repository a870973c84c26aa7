package connectapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// Peers are the Connect clients of the other brokers' services, made on
// first use for a broker at the address Address gives it and made again
// when that address changes. The tenant services' clients (RecordService,
// GroupService, TransactionService) call on a client's behalf, with the
// client's credential, and mark their calls forwarded (ForwardMarker);
// the ReplicaService's call with this broker's credential.
type Peers struct {
	hc          *http.Client
	brokerToken string
	address     func(id int32) string

	mu      sync.Mutex
	clients map[int32]*peerClients
}

type peerClients struct {
	address string
	record  sluicev1connect.RecordServiceClient
	replica sluicev1connect.ReplicaServiceClient
	group   sluicev1connect.GroupServiceClient
	txn     sluicev1connect.TransactionServiceClient
}

// NewPeers returns the clients of the brokers that address locates (the
// cluster view's address of broker id), over hc, with the broker
// credential brokerToken.
func NewPeers(hc *http.Client, brokerToken string, address func(id int32) string) *Peers {
	return &Peers{hc: hc, brokerToken: brokerToken, address: address, clients: map[int32]*peerClients{}}
}

// of returns the cached clients of broker id at its current address.
func (p *Peers) of(id int32) *peerClients {
	addr := p.address(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[id]; ok && c.address == addr {
		return c
	}
	base := "http://" + addr
	// Calls on a client's behalf are marked so the peer does not count
	// them in the tenant's requests again.
	fwd := connect.WithInterceptors(ForwardMarker{BrokerToken: p.brokerToken})
	c := &peerClients{
		address: addr,
		record:  sluicev1connect.NewRecordServiceClient(p.hc, base, connect.WithGRPC(), fwd),
		replica: sluicev1connect.NewReplicaServiceClient(p.hc, base, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(p.brokerToken))),
		group:   sluicev1connect.NewGroupServiceClient(p.hc, base, connect.WithGRPC(), fwd),
		txn:     sluicev1connect.NewTransactionServiceClient(p.hc, base, connect.WithGRPC(), fwd),
	}
	p.clients[id] = c
	return c
}

// Record is broker id's RecordService, called on a client's behalf.
func (p *Peers) Record(id int32) sluicev1connect.RecordServiceClient { return p.of(id).record }

// Replica is broker id's ReplicaService, called with this broker's
// credential.
func (p *Peers) Replica(id int32) sluicev1connect.ReplicaServiceClient { return p.of(id).replica }

// Group is broker id's GroupService, called on a client's behalf.
func (p *Peers) Group(id int32) sluicev1connect.GroupServiceClient { return p.of(id).group }

// Txn is broker id's TransactionService, called on a client's behalf.
func (p *Peers) Txn(id int32) sluicev1connect.TransactionServiceClient { return p.of(id).txn }

// askCoordinators answers a list request that every coordinator of an
// internal topic (the transaction-state topic) answers for its own
// partitions: with the no-forward header, this broker's own list (local);
// otherwise the lists of every broker leading a partition of it in view
// v, this one's (self) from local and the others' through remote
// (forwarded with the client's credential, counted by forwarded), sorted
// by key and without the duplicates a leadership move can give. A
// partition without a leader, or a broker that fails, makes it
// Unavailable: the list would be incomplete. (groups.Service.ListGroups
// does the same for the groups.)
func askCoordinators[Req, Res, T any](ctx context.Context, v *cluster.View, self int32, req *connect.Request[Req], topic string, errNoTopic error, what string,
	local func() ([]T, error),
	remote func(id int32) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	items func(*Res) []T, key func(T) string, forwarded func(),
) ([]T, error) {
	if req.Header().Get(NoForwardHeader) == "1" {
		return local()
	}
	t, ok := v.Topic(system.TenantID, topic)
	if !ok {
		return nil, errNoTopic
	}
	leaders := map[int32]bool{}
	for _, pm := range t.Partitions {
		if pm.Leader < 0 {
			return nil, v.NotLeader(self, pm) // a coordinator is offline: the list would be incomplete
		}
		leaders[pm.Leader] = true
	}
	var (
		mu   sync.Mutex
		all  []T
		errs []error
		wg   sync.WaitGroup
	)
	for id := range leaders {
		wg.Go(func() {
			var out []T
			var err error
			if id == self {
				out, err = local()
			} else {
				var res *connect.Response[Res]
				res, err = Forward(ctx, id, req, remote(id), forwarded)
				if err == nil {
					out = items(res.Msg)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, out...)
			if err != nil {
				errs = append(errs, fmt.Errorf("broker %d: %w", id, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, derr.New(derr.Unavailable, "%s: %w", what, errors.Join(errs...))
	}
	slices.SortFunc(all, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	// During a leadership move two brokers may both answer for a key.
	return slices.CompactFunc(all, func(a, b T) bool { return key(a) == key(b) }), nil
}
