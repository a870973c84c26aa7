package client

import (
	"fmt"
	"strings"
	"time"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Header is a record header. Keys need not be unique.
type Header struct {
	Key   string
	Value []byte
}

// Record is one message. To produce, set Topic, Value and optionally Key,
// Headers, Timestamp (zero: the producer's clock) and Partition (used only
// with WithManualPartitioner). After a successful produce, and on every
// consumed record, Partition, Offset and Timestamp are set: on a topic
// with message.timestamp.type=LogAppendTime, Timestamp is the time its
// partition's leader appended it, whatever the producer gave.
type Record struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time

	// Offset is the record's offset in its partition; -1 after a produce
	// with AcksNone or a duplicate whose original offset is unknown.
	Offset int64
	// LeaderEpoch is the leader epoch that wrote the record (consumed
	// records only).
	LeaderEpoch int32
}

// size is the record's approximate encoded size, for batching and buffer
// accounting.
func (r *Record) size() int {
	n := 21 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// Acks says when the cluster acknowledges a produce.
type Acks int8

const (
	// AcksAll waits until every in-sync replica has the record, and is
	// refused while fewer than min.insync.replicas are in sync. Default.
	AcksAll Acks = -1
	// AcksNone does not wait at all: fire and forget.
	AcksNone Acks = 0
	// AcksLeader waits until the leader has written the record.
	AcksLeader Acks = 1
)

// ParseAcks reads "all" (or "-1"), "1" (or "leader") and "0" (or "none").
func ParseAcks(s string) (Acks, error) {
	switch strings.ToLower(s) {
	case "all", "-1":
		return AcksAll, nil
	case "1", "leader":
		return AcksLeader, nil
	case "0", "none":
		return AcksNone, nil
	}
	return 0, fmt.Errorf("acks %q: choose all, 1 or 0", s)
}

func (a Acks) String() string {
	switch a {
	case AcksAll:
		return "all"
	case AcksLeader:
		return "1"
	case AcksNone:
		return "0"
	}
	return fmt.Sprintf("Acks(%d)", int8(a))
}

func (a Acks) proto() sluicev1.Acks {
	switch a {
	case AcksNone:
		return sluicev1.Acks_ACKS_NONE
	case AcksLeader:
		return sluicev1.Acks_ACKS_LEADER
	}
	return sluicev1.Acks_ACKS_ALL
}
