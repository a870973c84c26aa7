package connectapi

import (
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/tenants"
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
	base := endpoint.URL(addr, "http")
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
