package limit

import (
	"math"
	"time"
)

// Plans a tenant can be on. Signup puts a tenant on PlanFree. A row of the
// table has one default per plan (Def.Free, Def.Pro).
const (
	PlanFree = "free"
	PlanPro  = "pro"
)

// Plans returns the known plan names, cheapest first. The slice is a fresh
// copy.
func Plans() []string { return []string{PlanFree, PlanPro} }

// Limit is one of a tenant's limits: a row of the table.
type Limit int

// The limits, in the proto's field order (sluice.v1.Limits). A new limit
// goes at the end, with its row in table.
const (
	MaxTopics Limit = iota
	MaxPartitions
	MaxRetentionMs
	MaxStorageBytes
	MaxMessageBytes
	ProduceBytesPerSec
	FetchBytesPerSec
	RequestsPerSec
	MaxTotalStorageBytes
	ProducerIDsPerHour
	MaxTransactionalIDs
	MaxGroups
	MaxPartitionsPerTransaction
	MaxGroupsPerTransaction
	// Limits is how many there are.
	Limits
)

// Dimension is one rate a tenant is limited on: a Rate limit's index in
// the brokers' token buckets (dataplane/quota), the control plane's
// division (controlplane/quota) and the quota exchange's rates.
type Dimension int

// The rate dimensions. A new one goes at the end, with its row in
// dimensions and its Rate limit in table.
const (
	ProduceBytes Dimension = iota // record bytes produced
	FetchBytes                    // record bytes fetched
	Requests                      // requests
	ProducerIDs                   // new producer ids
	// Dimensions is how many there are.
	Dimensions
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
	tib = int64(1) << 40
	day = 24 * time.Hour
)

// MaxMessageBytesCeiling is the largest max_message_bytes any tenant may be
// given: records are framed, checksummed and replicated per batch in
// memory, so this bounds a broker's buffers.
const MaxMessageBytesCeiling = 64 * mib

// table is every limit: its name, kind, unit, plan defaults and what it
// bounds. Max is the largest value an override may set (0: no bound
// beyond int64); the limits the proto carried as int32 before the values
// map keep that bound, so a client reading the typed field reads it whole.
var table = [Limits]Def{
	MaxTopics: {Name: "max_topics", Kind: Count, Unit: Number, Noun: "topics", Label: "topics", Max: math.MaxInt32,
		Free: 10, Pro: 1000,
		Help: "topics the tenant may have", Charge: "CreateTopic, at the control plane"},
	MaxPartitions: {Name: "max_partitions", Kind: Count, Unit: Number, Noun: "partitions", Label: "partitions", Max: math.MaxInt32,
		Free: 30, Pro: 3000,
		Help: "partitions over all the tenant's topics", Charge: "CreateTopic and CreatePartitions, at the control plane"},
	MaxRetentionMs: {Name: "max_retention_ms", Kind: Ceiling, Unit: Milliseconds, Label: "max retention", Min: 1,
		Free: (7 * day).Milliseconds(), Pro: (90 * day).Milliseconds(),
		Help: "the longest retention.ms of a topic, in milliseconds", Charge: "a topic's retention.ms, at the control plane"},
	MaxStorageBytes: {Name: "max_storage_bytes", Kind: Ceiling, Unit: Bytes, Label: "max partition bytes", Min: 1,
		Free: 10 * gib, Pro: 10 * tib,
		Help: "the largest retention.bytes of one partition", Charge: "a topic's retention.bytes, at the control plane"},
	MaxMessageBytes: {Name: "max_message_bytes", Kind: Ceiling, Unit: Bytes, Label: "max message bytes", Min: 1, Max: MaxMessageBytesCeiling,
		Free: 1 * mib, Pro: 8 * mib,
		Help: "the largest batch a topic takes (max.message.bytes)", Charge: "a topic's max.message.bytes, at the control plane"},
	ProduceBytesPerSec: {Name: "produce_bytes_per_sec", Kind: Rate, Dimension: ProduceBytes, Unit: Bytes, Per: time.Second, Label: "produce", Min: 1,
		Free: 5 * mib, Pro: 100 * mib,
		Help: "produce bytes per second, cluster-wide", Charge: "Produce and ProduceMany: the record bytes, at the broker that appends"},
	FetchBytesPerSec: {Name: "fetch_bytes_per_sec", Kind: Rate, Dimension: FetchBytes, Unit: Bytes, Per: time.Second, Label: "fetch", Min: 1,
		Free: 10 * mib, Pro: 200 * mib,
		Help: "fetch bytes per second, cluster-wide", Charge: "Fetch: the bytes answered, at the leader"},
	RequestsPerSec: {Name: "requests_per_sec", Kind: Rate, Dimension: Requests, Unit: Number, Noun: "requests", Per: time.Second, Label: "requests", Min: 1, Max: math.MaxInt32,
		Free: 500, Pro: 20000,
		Help: "requests per second, cluster-wide", Charge: "every call a tenant's token authenticates at a broker"},
	MaxTotalStorageBytes: {Name: "max_total_storage_bytes", Kind: Holding, Unit: Bytes, Label: "storage", Min: 1,
		Free: 50 * gib, Pro: 100 * tib,
		Help: "bytes the tenant may hold, hot and cold, over all its partitions; produce is refused above it", Charge: "Produce, refused while the brokers' reports sum to it"},
	ProducerIDsPerHour: {Name: "producer_ids_per_hour", Kind: Rate, Dimension: ProducerIDs, Unit: Number, Noun: "producer ids", Per: time.Hour, Label: "new producer ids", Min: 1, Max: math.MaxInt32,
		Free: 1000, Pro: 100000,
		Help: "new producer ids (InitProducerId) per hour, cluster-wide", Charge: "every producer id a broker gives (InitProducerId)"},
	MaxTransactionalIDs: {Name: "max_transactional_ids", Kind: Count, Unit: Number, Noun: "transactional ids", Label: "transactional ids", Max: math.MaxInt32,
		Free: 100, Pro: 10000,
		Help: "transactional ids the tenant may have", Charge: "a new transactional id, reserved at the control plane"},
	MaxGroups: {Name: "max_groups", Kind: Count, Unit: Number, Noun: "groups", Label: "groups", Max: math.MaxInt32,
		Free: 100, Pro: 10000,
		Help: "consumer groups the tenant may have", Charge: "a new group, reserved at the control plane"},
	MaxPartitionsPerTransaction: {Name: "max_partitions_per_transaction", Kind: Transaction, Unit: Number, Noun: "partitions", Label: "partitions per txn", Min: 1, Max: math.MaxInt32,
		Free: 100, Pro: 3000,
		Help: "partitions one transaction may write to", Charge: "a transaction's partitions, at its coordinator"},
	MaxGroupsPerTransaction: {Name: "max_groups_per_transaction", Kind: Transaction, Unit: Number, Noun: "groups", Label: "groups per txn", Min: 1, Max: math.MaxInt32,
		Free: 10, Pro: 100,
		Help: "groups whose offsets one transaction may commit", Charge: "a transaction's groups, at its coordinator"},
}

// dimensions is every rate dimension: its name (in metrics and the quota
// exchange) and the brokers' bucket burst. Its limit is the Rate row
// whose Dimension it is.
var dimensions = [Dimensions]DimensionDef{
	ProduceBytes: {Name: "produce_bytes"},
	FetchBytes:   {Name: "fetch_bytes"},
	Requests:     {Name: "requests"},
	// Producer ids come a fraction of one per second: a free-plan
	// tenant's 1,000 an hour is 166 at once with 10 minutes, so a script
	// starting one producer after another, or a fleet restarting, is not
	// refused after a handful.
	ProducerIDs: {Name: "producer_ids", Burst: 10 * time.Minute},
}
