// Package system names what the cluster owns rather than a tenant: the
// system tenant and its internal topics, the consumer groups' offsets
// topic and the transaction coordinators' state topic. It is the one home
// of these names and of their partition counts' defaults: the control
// plane creates the topics (controlplane/api) and leaves the system tenant
// out of listings, metering and billing; the brokers host the group and
// transaction coordinators on their partitions (dataplane/broker). A leaf:
// it imports nothing.
package system

// TenantID is the tenant that owns Sluice's internal topics. It is created
// by a migration, has no API keys, and ListTenants leaves it out.
const TenantID = "00000000-0000-0000-0000-000000000001"

// OffsetsTopic is the system tenant's internal topic holding consumer
// groups' committed offsets; each partition's leader coordinates the
// groups that hash to it (dataplane/coordinator.PartitionOf).
const OffsetsTopic = "__consumer_offsets"

// TransactionStateTopic is the system tenant's internal topic holding the
// transaction coordinators' state (dataplane/txn); each partition's leader
// coordinates the transactional ids that hash to it (txn.PartitionOf).
const TransactionStateTopic = "__transaction_state"

// The internal topics' defaults (the control plane's
// --offsets-topic-partitions, --offsets-topic-replication-factor,
// --transaction-state-topic-partitions and
// --transaction-state-topic-replication-factor). A topic's partition count
// is fixed once it is created: its records' keys hash to their partition.
const (
	DefaultOffsetsTopicPartitions                 = 16
	DefaultOffsetsTopicReplicationFactor          = 3
	DefaultTransactionStateTopicPartitions        = 16
	DefaultTransactionStateTopicReplicationFactor = 3
)
