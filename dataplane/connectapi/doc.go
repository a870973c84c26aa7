// Package connectapi is the data plane's Connect front door: the handlers
// of the client port's services (RecordService, GroupService,
// TransactionService, and the brokers' ReplicaService) are thin adapters
// that decode a request, call a protocol-neutral service (dataplane/...
// services, which take plain Go requests and return plain results and
// domain errors, dataplane/derr), and map the answer back. Errors are
// mapped in one place: ErrorInterceptor, through connecterr.ToConnect.
// The Connect side of the brokers' own calls lives here too: Peers, the
// clients of the other brokers' services (brokers.go, built from the
// cluster view's address of each broker); the replicas' calls to leaders
// and the controller, and the reservation of producer-id blocks
// (peers.go); the group service's calls to partitions' leaders and other
// brokers (GroupLeaders, GroupPeers: grouppeers.go); and the HMAC
// marking a request one broker forwards for its client (ForwardMarker).
// Forwarding a request to the partition's leader is Connect's business
// (a Kafka client is told where the leader is instead): Forward sends the
// caller's request on once, marked NoForwardHeader so that the leader
// answers it itself; a leader whose address the view does not know is
// not called (Forwardable): the caller gets the NotLeader.
//
// The adapters so far: Transactions (txns.go: the TransactionService over
// dataplane/txns, InitProducerId's transactional half, and the
// ReplicaService's WriteTxnMarkers and ListAllTransactions; its
// ListTransactions asks every coordinator, askCoordinators), with
// TxnPeers, the transaction service's calls to other brokers over their
// Connect services (a peer's answer relayed with connecterr.Relay).
package connectapi
