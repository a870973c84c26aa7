package store

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
)

// The helpers below hold the checks every driver makes before writing, so
// both drivers enforce the same contract from one place.

// CheckTenantStatus accepts TenantActive and TenantSuspended.
func CheckTenantStatus(status string) error {
	switch status {
	case TenantActive, TenantSuspended:
		return nil
	}
	return fmt.Errorf("invalid tenant status %q: want %q or %q", status, TenantActive, TenantSuspended)
}

// CheckTopic validates a topic about to be created with its partitions:
// partition numbers are exactly 0..Partitions-1.
func CheckTopic(t Topic, parts []Partition) error {
	if t.Name == "" {
		return fmt.Errorf("invalid topic: empty name")
	}
	if t.Partitions <= 0 || t.ReplicationFactor <= 0 {
		return fmt.Errorf("invalid topic %q: %d partitions, replication factor %d", t.Name, t.Partitions, t.ReplicationFactor)
	}
	if len(parts) != int(t.Partitions) {
		return fmt.Errorf("invalid topic %q: %d partitions declared, %d given", t.Name, t.Partitions, len(parts))
	}
	seen := make([]bool, len(parts))
	for _, p := range parts {
		if p.Partition < 0 || int(p.Partition) >= len(parts) || seen[p.Partition] {
			return fmt.Errorf("invalid topic %q: partition numbers must be 0..%d, each once", t.Name, len(parts)-1)
		}
		seen[p.Partition] = true
	}
	return nil
}

// CanonicalID returns the canonical form of a UUID id, or false when id is
// not a UUID (drivers answer ErrNotFound for lookups by such ids).
func CanonicalID(id string) (string, bool) {
	u, err := uuid.Parse(id)
	if err != nil {
		return "", false
	}
	return u.String(), true
}

// CanonicalIDs returns the canonical forms of the UUIDs among ids, each
// once, sorted; ids that are not UUIDs are left out.
func CanonicalIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if c, ok := CanonicalID(id); ok {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckNewID is CanonicalID for an id about to be written: not a UUID is an error.
func CheckNewID(kind, id string) (string, error) {
	c, ok := CanonicalID(id)
	if !ok {
		return "", fmt.Errorf("invalid %s id %q: not a UUID", kind, id)
	}
	return c, nil
}

// OverridesJSON validates tenant overrides; nil or empty is "{}".
func OverridesJSON(b []byte) (string, error) {
	if len(b) == 0 {
		return "{}", nil
	}
	if !json.Valid(b) {
		return "", fmt.Errorf("invalid tenant overrides: not JSON")
	}
	return string(b), nil
}

// CheckLimits returns a *LimitError when a tenant holding topics topics and
// parts partitions may not add one topic of request partitions.
func CheckLimits(l CountLimits, topics, parts, request int64) error {
	if l.MaxTopics > 0 && topics+1 > l.MaxTopics {
		return &LimitError{Limit: "topics", Current: topics, Request: 1, Max: l.MaxTopics}
	}
	return CheckPartitionLimit(l, parts, request)
}

// CheckPartitionLimit returns a *LimitError when a tenant holding parts
// partitions may not add request more (to a new topic or an existing one).
func CheckPartitionLimit(l CountLimits, parts, request int64) error {
	if l.MaxPartitions > 0 && parts+request > l.MaxPartitions {
		return &LimitError{Limit: "partitions", Current: parts, Request: request, Max: l.MaxPartitions}
	}
	return nil
}

// CheckNewPartitions validates the partitions AddPartitions is about to add
// to a topic of from partitions: at least one, numbered from, from+1, ...
// each once, and the new count within int32.
func CheckNewPartitions(from int32, parts []Partition) error {
	if from < 0 {
		return fmt.Errorf("invalid partition growth: current count %d is negative", from)
	}
	if len(parts) == 0 {
		return fmt.Errorf("invalid partition growth: no partitions to add")
	}
	if int64(from)+int64(len(parts)) > math.MaxInt32 {
		return fmt.Errorf("invalid partition growth: %d + %d partitions overflows", from, len(parts))
	}
	seen := make([]bool, len(parts))
	for _, p := range parts {
		i := int64(p.Partition) - int64(from)
		if i < 0 || i >= int64(len(parts)) || seen[i] {
			return fmt.Errorf("invalid partition growth: new partition numbers must be %d..%d, each once; got %d", from, int(from)+len(parts)-1, p.Partition)
		}
		seen[i] = true
	}
	return nil
}

// CheckFencedUpdate checks a controller partition write: the new partition
// epoch is exactly one more than the expected one.
func CheckFencedUpdate(p Partition, expectedEpoch int32) error {
	if p.PartitionEpoch != expectedEpoch+1 {
		return fmt.Errorf("invalid partition update of %s/%d: new partition epoch %d, want expected epoch %d + 1",
			p.TopicID, p.Partition, p.PartitionEpoch, expectedEpoch)
	}
	return nil
}

// CheckLeaseRequest checks the arguments of AcquireControllerLease.
func CheckLeaseRequest(holder string, ttl time.Duration) error {
	if holder == "" {
		return fmt.Errorf("invalid controller lease request: empty holder")
	}
	if ttl <= 0 {
		return fmt.Errorf("invalid controller lease request: ttl %s is not positive", ttl)
	}
	return nil
}
