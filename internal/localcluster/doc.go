// Package localcluster runs a Sluice cluster in one process: a control
// plane and N brokers on loopback, as `sluice dev` runs them and as the
// client, broker and in-process e2e tests boot them. It is the one place
// that wires them together: New starts the control plane (SQLite in the
// data dir by default, any store URL otherwise), StartBrokers starts the
// brokers, each with its own folder, and WaitBrokers waits until the
// control plane counts them live. A cluster exposes its endpoints, the
// brokers' addresses, IDs and credentials, stops and restarts one broker
// (failover tests) and stops everything, brokers first (Close).
//
// The package does not import the broker: a BrokerFunc builds each broker
// from a BrokerSpec (internal/localcluster/brokernode builds real
// dataplane/broker brokers; the broker's own tests, which cannot import a
// package that imports theirs, pass their own). Neither the control plane
// nor the data plane imports this package (internal/layering).
//
// # Faults
//
// Every broker's client port runs the cluster's fault interceptor
// (BrokerSpec.Interceptors, which a BrokerFunc hands to the broker's
// Deps.Interceptors), and so does the control plane's API port
// (controlplane.Deps.Interceptors; a fault names it with Broker:
// ControlPlane): AddFault makes calls of one procedure on one broker (or
// all), for one topic and partition (when the request names them), fail
// with a given domain or Connect error, wait, or lose their answer, for a
// bounded number of calls, in the manner of franz-go's kfake. A fault's
// Hook decides per call (a gate, a refusal of one batch), its Answer sees
// and may edit what the server answered, Entries refuses one partition's
// entry of a ProduceMany, and every call a fault hits is recorded
// (FaultHandle.Calls). The client's tests drive their error paths with
// these instead of hand-written fake brokers: a wrong leader hint, a
// leader that stops with its connections open (an answer held with
// AnswerDelay, the partition's election written to the control plane's
// store), a slow leader, brokers that moved (an Answer on the control
// plane's metadata). See Fault.
//
// # Goroutines
//
// The control plane's Run and each broker's Run have a goroutine each,
// owned by the cluster; Close (or StopBroker for one broker) cancels and
// waits for them. A Cluster's methods are safe for concurrent use.
package localcluster
