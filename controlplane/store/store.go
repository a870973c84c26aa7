// Package store is the control plane's durable metadata: tenants, API keys,
// signing keys, topics, partition state, brokers, the controller lease,
// remote-segment metadata, and the lag samples, alerts, webhooks and webhook
// deliveries of lag and retention-expiry alerts.
//
// One interface, one SQL implementation, two engines: the methods are
// written once in controlplane/store/sqlstore, over database/sql with a small
// dialect seam, and run on controlplane/store/postgres (pgx, production) and
// controlplane/store/sqlite (modernc.org/sqlite, for `sluice dev`), which
// open the database, apply their own migrations (the DDL differs) and supply
// the dialect. Both pass the same contract suite in controlplane/storetest.
//
// Errors are translated once, in sqlstore with each engine's dialect, into
// the sentinels below;
// callers branch on them with errors.Is / errors.As and never see driver
// errors. Every tenant-owned object is addressed by (tenant id, ...): a
// lookup under the wrong tenant is ErrNotFound, indistinguishable from a
// missing object.
//
// Counting limits (topics and partitions per tenant) are enforced inside the
// same transaction that creates the topic or adds partitions to it,
// serialised per tenant, so concurrent creations and growths never exceed
// them. A topic's partitions are only ever added (AddPartitions), never
// removed but with the topic: a partition number, once given, names the
// same partition for the topic's lifetime.
//
// # Controller lease and fencing
//
// One control-plane replica at a time is the controller: the holder of the
// single controller-lease row (AcquireControllerLease). Every change of
// holder bumps the lease epoch, and the controller's partition writes
// (UpdatePartitionFenced) succeed only while the stored epoch is still the
// one the writer holds, checked in the same transaction as the write and
// serialised against lease takeovers. So a deposed controller (paused past
// its lease, partitioned from the database) can never overwrite a decision
// of its successor: lease expiry is only about liveness, the epoch is what
// makes it safe. The lease times come from the callers' clocks: replicas'
// clocks must agree to well within the lease TTL for the lease to mean
// "one active controller at a time"; fencing holds whatever the clocks say.
//
// # Remote segments
//
// The metadata of log segments copied to the object store (tiered storage;
// see remote.go) is written only by the partition's current leader, fenced
// by its broker and leader epochs inside the write's transaction, which is
// serialised against the partition's state changes. The offset ranges ever
// finished are consecutive, without gap or overlap. These writes are not
// metadata changes: they leave the metadata version as is. Remote segments
// are deleted with their partition, that is with their topic.
//
// # Alerts
//
// Lag samples, alerts, webhooks and webhook deliveries (alert.go,
// webhook.go) are tenant-owned like topics. An alert's state changes are
// compare-and-set on its stored state, and a key has at most one active
// alert (a unique index), so control-plane replicas evaluating at once
// never double a transition. Webhook deliveries are an outbox table leased
// to one sender at a time; why not River is in webhook.go. None of these
// writes is a metadata change.
//
// # Usage and billing
//
// Hourly usage rows, the keys and cursors that apply brokers' usage reports
// exactly once, the control plane's interval meters, the brokers' latest
// quota reports, plan prices and invoices (usage.go, billing.go) are not
// metadata changes either. A finalized invoice is never written again.
//
// # Metadata version
//
// MetadataVersion is a global counter bumped, in the same transaction, by
// every change to topics (create, config update, partitions added, delete), partition state
// and brokers (registration; not heartbeats, which only extend a lease). A
// reader that reads the version before reading metadata, and polls the
// version later, sees every change after the first read as a newer version.
// A batched partition write (UpdatePartitions, UpdatePartitionsFenced)
// commits once: readers see all its changes under one new version (on
// PostgreSQL the counter moves by one per batch; SQLite's row triggers move
// it by one per partition written).
// MetadataChangesSince lists what changed after a version, so that such a
// reader need not re-read every partition when the version moves: each
// topic and partition row records the version of its last write, and a
// deleted topic leaves a tombstone, kept about an hour.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Sentinel errors returned by every driver.
var (
	// ErrNotFound: the object does not exist (or belongs to another tenant).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a unique name is taken. Wrapped in *AlreadyExistsError.
	ErrAlreadyExists = errors.New("already exists")
	// ErrChangesPruned: MetadataChangesSince was asked for changes older than those it keeps.
	ErrChangesPruned = errors.New("metadata changes pruned")
	// ErrConflict: a compare-and-set lost (stale epoch or concurrent change).
	ErrConflict = errors.New("conflict")
	// ErrLimitExceeded: a count limit would be exceeded. Wrapped in *LimitError.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrFenced: a controller write named a controller epoch that is no longer
	// the lease's (the writer was deposed). It wraps ErrConflict.
	ErrFenced = fmt.Errorf("controller epoch superseded: %w", ErrConflict)
)

// AlreadyExistsError names which unique field collided ("tenant name",
// "email", "topic name", ...).
type AlreadyExistsError struct{ What string }

func (e *AlreadyExistsError) Error() string { return e.What + " already exists" }
func (e *AlreadyExistsError) Unwrap() error { return ErrAlreadyExists }

// LimitError is returned when creating an object would pass a count limit.
type LimitError struct {
	Limit   string // "topics" or "partitions"
	Current int64  // count before the request
	Request int64  // how many the request adds
	Max     int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s limit exceeded: %d in use, %d requested, limit %d", e.Limit, e.Current, e.Request, e.Max)
}
func (e *LimitError) Unwrap() error { return ErrLimitExceeded }

// NewID returns a new time-ordered unique id (UUIDv7) for tenants and topics.
// Ids are never reused.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// Tenant status values.
const (
	TenantActive    = "active"
	TenantSuspended = "suspended"
)

// Tenant is a customer; every other tenant-owned object belongs to exactly one.
type Tenant struct {
	ID        string
	Name      string
	Email     string
	Plan      string
	Status    string
	Overrides []byte // JSON of tenants.Overrides; nil or "{}" means none
	CreatedAt time.Time
}

// APIKey is a long-lived credential. Only the hash of its secret is stored.
type APIKey struct {
	ID        string // public key id (part of the token)
	TenantID  string
	Name      string
	Hash      []byte
	Scopes    []string
	CreatedAt time.Time
	RevokedAt time.Time // zero while active
}

// Revoked reports whether the key was revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// SigningKey is an Ed25519 JWT signing key shared by all control-plane replicas.
type SigningKey struct {
	KID       string
	Private   []byte // ed25519 private key (64 bytes)
	CreatedAt time.Time
	RetiredAt time.Time // zero while active
}

// The values of TopicConfig.MessageTimestampType, as Kafka spells them.
const (
	CreateTime    = "CreateTime"
	LogAppendTime = "LogAppendTime"
)

// TopicConfig holds per-topic settings (Kafka names in comments).
type TopicConfig struct {
	RetentionMs         int64  // retention.ms; -1 = unlimited
	RetentionBytes      int64  // retention.bytes per partition; -1 = unlimited
	LocalRetentionMs    int64  // local.retention.ms (hot tier); -2 = same as RetentionMs
	LocalRetentionBytes int64  // local.retention.bytes; -2 = same as RetentionBytes
	MaxMessageBytes     int32  // max.message.bytes
	MinInsyncReplicas   int32  // min.insync.replicas
	CleanupPolicy       string // cleanup.policy: "delete"
	// UncleanLeaderElection (unclean.leader.election.enable) lets the
	// controller elect a live replica outside the ISR when no ISR member is
	// live: the partition comes back, losing what that replica lacks.
	UncleanLeaderElection bool
	// MessageTimestampType (message.timestamp.type): "CreateTime", the
	// producer's timestamps, or "LogAppendTime", the leader's at append.
	MessageTimestampType string
}

// Topic is a named, partitioned log of one tenant. Its ID is never reused.
type Topic struct {
	ID                string
	TenantID          string
	Name              string
	Partitions        int32
	ReplicationFactor int32
	Config            TopicConfig
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// Partition is the controller-owned state of one partition. Every change is
// a compare-and-set on PartitionEpoch.
type Partition struct {
	TopicID        string
	Partition      int32
	Replicas       []int32 // replicas[0] is the preferred leader
	Leader         int32   // -1 when offline
	LeaderEpoch    int32
	ISR            []int32
	PartitionEpoch int32
}

// Broker is a data-plane broker known to the control plane.
type Broker struct {
	ID      int32
	Address string
	// ExternalAddress is where clients outside the cluster reach the
	// broker (its external listener); empty without one.
	ExternalAddress string
	// KafkaAddress is where Kafka clients reach the broker (its Kafka
	// listener, host:port); empty without one.
	KafkaAddress   string
	Rack           string
	Epoch          int64 // bumped on every registration; fences zombies
	LeaseExpiresAt time.Time
	RegisteredAt   time.Time
}

// Live reports whether the broker's lease is unexpired at now.
func (b Broker) Live(now time.Time) bool { return now.Before(b.LeaseExpiresAt) }

// MetadataChanges is what changed in the metadata after a version
// (MetadataChangesSince).
type MetadataChanges struct {
	// Version is the metadata version the changes bring a reader to.
	Version int64
	// Partitions changed, ordered as ListAllPartitions orders them.
	Partitions []PartitionWithTopic
	// DeletedTopics are the ids of the topics deleted, sorted.
	DeletedTopics []string
}

// PartitionWithTopic is a partition's state with what a broker needs to host
// it: its topic's tenant, name and config.
type PartitionWithTopic struct {
	Partition
	TenantID  string
	TopicName string
	Config    TopicConfig
}

// ControllerLease is the single lease whose holder is the active controller.
// Epoch is bumped on every change of holder (the first holder gets 1); a
// holder renewing keeps its epoch.
type ControllerLease struct {
	Holder    string
	Epoch     int64
	ExpiresAt time.Time
}

// Held reports whether the lease is unexpired at now.
func (l ControllerLease) Held(now time.Time) bool { return now.Before(l.ExpiresAt) }

// CountLimits bound what a tenant may create; zero means unlimited.
type CountLimits struct {
	MaxTopics     int64
	MaxPartitions int64
}

// TenantUsage is what a tenant currently holds.
type TenantUsage struct {
	Topics     int64
	Partitions int64
}

// Store is the control-plane metadata store. All methods are safe for
// concurrent use. Times are stored with at least millisecond precision and
// returned in UTC.
type Store interface {
	// CreateTenant creates a tenant and its first API key atomically.
	// A taken name or email → *AlreadyExistsError ("tenant name" / "email").
	CreateTenant(ctx context.Context, t Tenant, firstKey APIKey) error
	// GetTenant by id → ErrNotFound.
	GetTenant(ctx context.Context, id string) (Tenant, error)
	// GetTenantByName → ErrNotFound.
	GetTenantByName(ctx context.Context, name string) (Tenant, error)
	// ListTenants in creation order, at most limit after the id afterID ("" = from start).
	ListTenants(ctx context.Context, afterID string, limit int) ([]Tenant, error)
	// UpdateTenant applies update to the tenant's current state and stores the plan, status and
	// overrides JSON it returns (other fields are ignored), atomically: concurrent updates are
	// serialised and none is lost. An error from update aborts the change and is returned as is.
	// Unknown id → ErrNotFound.
	UpdateTenant(ctx context.Context, id string, update func(Tenant) (Tenant, error)) (Tenant, error)
	// TenantUsage counts the tenant's topics and partitions.
	TenantUsage(ctx context.Context, tenantID string) (TenantUsage, error)
	// ListSuspendedTenants returns the ids of every tenant whose status is TenantSuspended,
	// ordered by id (the brokers' suspension feed: the whole set, from one snapshot).
	ListSuspendedTenants(ctx context.Context) ([]string, error)

	// CreateAPIKey stores a new key (unique id) for an existing tenant → ErrNotFound for an unknown tenant.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// GetAPIKey by key id, any tenant (authentication looks keys up by id) → ErrNotFound.
	GetAPIKey(ctx context.Context, id string) (APIKey, error)
	// ListAPIKeys of a tenant, revoked included, in creation order.
	ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error)
	// RevokeAPIKey marks the key revoked at `at`. Idempotent: revoking a revoked key keeps the first
	// time and succeeds. Another tenant's key → ErrNotFound.
	RevokeAPIKey(ctx context.Context, tenantID, id string, at time.Time) (APIKey, error)
	// ListRevokedAPIKeys returns keys revoked at or after since (the brokers' revocation feed).
	ListRevokedAPIKeys(ctx context.Context, since time.Time) ([]APIKey, error)

	// InsertSigningKey adds a JWT signing key → *AlreadyExistsError on a kid collision.
	InsertSigningKey(ctx context.Context, k SigningKey) error
	// ListSigningKeys returns all signing keys, oldest first.
	ListSigningKeys(ctx context.Context) ([]SigningKey, error)
	// RetireSigningKey sets RetiredAt (idempotent, keeps the first time) → ErrNotFound.
	RetireSigningKey(ctx context.Context, kid string, at time.Time) error
	// DeleteSigningKey removes a key no token can still need → ErrNotFound.
	DeleteSigningKey(ctx context.Context, kid string) error

	// CreateTopic creates the topic and its partitions in one transaction, refusing with
	// *LimitError when the tenant would pass limits, and *AlreadyExistsError ("topic name") when the
	// name is taken in that tenant. len(parts) must equal t.Partitions.
	CreateTopic(ctx context.Context, t Topic, parts []Partition, limits CountLimits) error
	// GetTopic by tenant and name → ErrNotFound.
	GetTopic(ctx context.Context, tenantID, name string) (Topic, error)
	// GetTopicByID → ErrNotFound.
	GetTopicByID(ctx context.Context, id string) (Topic, error)
	// ListTopics of a tenant ordered by name.
	ListTopics(ctx context.Context, tenantID string) ([]Topic, error)
	// UpdateTopicConfig applies update to the topic's current state and stores the config it
	// returns with UpdatedAt = at, atomically: concurrent updates are serialised and none is
	// lost. An error from update aborts the change and is returned as is. → ErrNotFound.
	UpdateTopicConfig(ctx context.Context, tenantID, name string, at time.Time, update func(Topic) (TopicConfig, error)) (Topic, error)
	// DeleteTopic removes the topic and its partition state, returning what was deleted → ErrNotFound.
	DeleteTopic(ctx context.Context, tenantID, name string) (Topic, error)
	// AddPartitions grows the tenant's topic topicID from `from` partitions to from+len(parts), in
	// one transaction: parts are the new partitions' state, numbered from..from+len(parts)-1 each
	// once (their TopicID is ignored); the existing partitions are untouched; the topic's
	// Partitions becomes the new count and UpdatedAt `at`. The tenant's partition count (all its
	// topics) plus len(parts) is checked against limits.MaxPartitions (MaxTopics does not apply)
	// serialised with every creation and growth of the tenant's topics, so concurrent calls never
	// pass it together → *LimitError (Current = the tenant's partitions, Request = len(parts)).
	// The topic no longer having `from` partitions (a concurrent growth) → ErrConflict, checked
	// before the limit; an unknown topic, or another tenant's → ErrNotFound. Returns the topic as
	// stored.
	AddPartitions(ctx context.Context, tenantID, topicID string, from int32, parts []Partition, limits CountLimits, at time.Time) (Topic, error)

	// ListPartitions of a topic ordered by partition number.
	ListPartitions(ctx context.Context, topicID string) ([]Partition, error)
	// UpdatePartition replaces leader, leader epoch, ISR and replicas if the stored
	// PartitionEpoch equals expectedEpoch; the stored epoch becomes p.PartitionEpoch.
	// Stale expectedEpoch → ErrConflict; unknown partition → ErrNotFound.
	UpdatePartition(ctx context.Context, p Partition, expectedEpoch int32) error
	// UpdatePartitionFenced is the controller's UpdatePartition: it also requires the stored
	// controller-lease epoch to equal controllerEpoch (else ErrFenced, which is an ErrConflict),
	// checked atomically with the write and serialised against lease takeovers, and requires
	// p.PartitionEpoch == expectedEpoch+1 (else an error that is none of the sentinels).
	// Stale expectedEpoch → ErrConflict; unknown partition → ErrNotFound.
	UpdatePartitionFenced(ctx context.Context, p Partition, expectedEpoch int32, controllerEpoch int64) error
	// UpdatePartitions applies every update as UpdatePartition would, all in one transaction (one
	// commit: readers see the whole batch or none of it), and returns one outcome per update, in
	// order: nil (written), ErrConflict (stale expected epoch) or ErrNotFound (unknown partition).
	// One update's loss leaves the others as they are. An update of a partition an earlier update
	// of the batch wrote is compared with what that one wrote. The error is the whole batch's
	// (nothing written, outcomes nil).
	UpdatePartitions(ctx context.Context, updates []PartitionUpdate) ([]error, error)
	// UpdatePartitionsFenced is the controller's UpdatePartitions: the stored controller-lease epoch
	// must equal controllerEpoch, else ErrFenced for the whole batch and nothing is written; every
	// update must pass CheckFencedUpdate, else an error (none of the sentinels) for the whole batch.
	UpdatePartitionsFenced(ctx context.Context, updates []PartitionUpdate, controllerEpoch int64) ([]error, error)
	// ListAllPartitions returns every partition of every topic with its topic's tenant, name
	// and config, ordered by tenant id, topic name (bytewise) and partition, from one snapshot.
	ListAllPartitions(ctx context.Context) ([]PartitionWithTopic, error)
	// ListTopicsPartitions returns every partition of the topics topicIDs names (any tenant)
	// with its topic's tenant, name and config, ordered as ListAllPartitions, from one
	// snapshot. Ids that name no topic (unknown, deleted, not a UUID) are skipped; an id named
	// twice counts once. Its cost follows the topics named, not the number of partitions.
	ListTopicsPartitions(ctx context.Context, topicIDs []string) ([]PartitionWithTopic, error)
	// PartitionLoad counts, per broker, the replicas and leaders (leader >= 0) it holds over all
	// topics, from one snapshot; brokers holding nothing are absent. It is exact after every write
	// that creates, grows, deletes or changes partitions, and its cost does not grow with the
	// number of partitions (placement reads it on every topic creation and growth).
	PartitionLoad(ctx context.Context) (map[int32]BrokerLoad, error)
	// MetadataVersion returns the global metadata version (0 on a new store). Every change to
	// topics, partitions and broker registrations increases it in the same transaction;
	// heartbeats and the controller lease do not.
	MetadataVersion(ctx context.Context) (int64, error)
	// MetadataChangesSince returns, from one snapshot, the metadata version and what changed
	// after version since: every partition written after it (created, grown, or its state
	// changed), every partition of a topic written after it (created, config updated,
	// partitions added), and the ids of the topics deleted after it. A row changed again
	// since is returned once, as it is now. Broker registrations are not listed (the broker
	// list is small; ListBrokers reads it). Its cost follows the changes, not the number of
	// partitions. since below the horizon up to which deletions are kept (about an hour, and
	// never before the store began recording them) → ErrChangesPruned: read ListAllPartitions.
	MetadataChangesSince(ctx context.Context, since int64) (MetadataChanges, error)

	// AcquireControllerLease acquires the controller lease for holder until now+ttl when it is
	// free or expired at now (bumping the epoch when the holder changes), or renews it when
	// holder already holds it (same epoch; the expiry never moves backwards). Otherwise it
	// returns the current lease and acquired=false. Two holders are never granted overlapping
	// leases (as measured by the callers' now). holder must not be empty; ttl must be positive.
	AcquireControllerLease(ctx context.Context, holder string, now time.Time, ttl time.Duration) (lease ControllerLease, acquired bool, err error)

	// RegisterBroker inserts or updates a broker, bumping its epoch (first registration: 1),
	// and sets its lease. Returns the stored broker.
	RegisterBroker(ctx context.Context, b Broker) (Broker, error)
	// HeartbeatBroker extends the lease of (id, epoch) to leaseUntil. Unknown id → ErrNotFound;
	// epoch not current → ErrConflict (a zombie).
	HeartbeatBroker(ctx context.Context, id int32, epoch int64, leaseUntil time.Time) (Broker, error)
	// ListBrokers ordered by id.
	ListBrokers(ctx context.Context) ([]Broker, error)

	// AllocateProducerIDs reserves the next count producer ids for broker
	// (id, epoch) and returns the first. Blocks never overlap and no id is
	// handed out twice. Unknown broker → ErrNotFound; epoch not current →
	// ErrConflict; count < 1 is an error.
	AllocateProducerIDs(ctx context.Context, brokerID int32, brokerEpoch int64, count int32, at time.Time) (int64, error)

	// AddRemoteSegment records a copy to the object store about to start: seg in state
	// RemoteCopyStarted, with BrokerID = f.BrokerID and CreatedAt = UpdatedAt = seg.CreatedAt
	// (now when zero); seg.State, seg.BrokerID and seg.UpdatedAt are ignored. seg.ID is the
	// caller's new UUID, seg.TenantID must be the topic's tenant and seg.LeaderEpoch
	// f.LeaderEpoch. In one transaction, serialised against the partition's state changes and
	// its other remote-segment writes, f must name the partition's current leader at its
	// current broker epoch and leader epoch, and seg.BaseOffset must be the partition's next
	// base offset (any base when no segment was ever finished): otherwise *RemoteSegmentError
	// (an ErrConflict), decided by CheckRemoteAdd. Unknown broker, topic or partition →
	// ErrNotFound (wrapped, naming which); a malformed seg (CheckRemoteSegment) → an error that
	// is none of the sentinels. Returns the stored segment.
	AddRemoteSegment(ctx context.Context, f LeaderFence, seg RemoteSegment) (RemoteSegment, error)
	// UpdateRemoteSegmentState moves the segment (topicID, partition, segmentID) to state `to`
	// with UpdatedAt = at, fenced and serialised as AddRemoteSegment and decided by
	// CheckRemoteUpdate: a refusal is *RemoteSegmentError; moving to the state the segment is
	// in already changes nothing and succeeds (idempotent retries). Unknown broker, topic,
	// partition or segment → ErrNotFound (wrapped, naming which). Returns the segment as
	// stored after the call.
	UpdateRemoteSegmentState(ctx context.Context, f LeaderFence, topicID string, partition int32, segmentID string, to RemoteSegmentState, at time.Time) (RemoteSegment, error)
	// ListRemoteSegments returns a partition's remote segments ordered by base offset (then
	// creation time and id), only those in one of states unless states is empty. An unknown
	// topic or partition has none.
	ListRemoteSegments(ctx context.Context, topicID string, partition int32, states []RemoteSegmentState) ([]RemoteSegment, error)

	// AlertStore: lag samples, alerts, webhooks and their deliveries (alert.go).
	AlertStore

	// UsageStore: metered usage, quota reports, plan prices and invoices (usage.go,
	// billing.go).
	UsageStore

	// Close releases the store's resources.
	Close() error
}

// BrokerLoad is the number of replicas and leaders a broker holds.
type BrokerLoad struct{ Replicas, Leaders int }
