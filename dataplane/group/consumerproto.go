package group

import (
	"encoding/binary"
	"errors"
	"slices"
)

// Kafka's consumer protocol (protocol type "consumer" of the classic group
// protocol): what a member's metadata (its subscription) and its
// assignment carry, opaque to the coordinator but read here so that a
// classic group's members can be described like the consumer protocol's.
// Both begin with an int16 version; only the fields every version has at
// the front are read.

var errShortConsumerProto = errors.New("consumer protocol: truncated")

// protoReader reads Kafka's classic (non-flexible) encoding.
type protoReader struct {
	b   []byte
	err error
}

func (r *protoReader) int16() int16 {
	if r.err != nil || len(r.b) < 2 {
		r.err = errShortConsumerProto
		return 0
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return v
}

func (r *protoReader) int32() int32 {
	if r.err != nil || len(r.b) < 4 {
		r.err = errShortConsumerProto
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

func (r *protoReader) string() string {
	n := int(r.int16())
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errShortConsumerProto
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// count reads an array length, bounded by what is left (each element at
// least min bytes).
func (r *protoReader) count(min int) int {
	n := int(r.int32())
	if r.err != nil || n < 0 || n*min > len(r.b) {
		r.err = errShortConsumerProto
		return 0
	}
	return n
}

// ConsumerSubscription returns the topics of a consumer-protocol
// subscription (a classic member's metadata).
func ConsumerSubscription(meta []byte) ([]string, error) {
	r := protoReader{b: meta}
	r.int16() // version
	n := r.count(2)
	topics := make([]string, 0, n)
	for range n {
		topics = append(topics, r.string())
	}
	if r.err != nil {
		return nil, r.err
	}
	slices.Sort(topics)
	return topics, nil
}

// ConsumerAssignment returns the partitions of a consumer-protocol
// assignment (what a classic group's leader gave a member).
func ConsumerAssignment(b []byte) (TopicPartitions, error) {
	out := TopicPartitions{}
	if len(b) == 0 {
		return out, nil // no assignment yet, or an empty one
	}
	r := protoReader{b: b}
	r.int16() // version
	n := r.count(6)
	for range n {
		t := r.string()
		m := r.count(4)
		for range m {
			out[t] = append(out[t], r.int32())
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	for t := range out {
		slices.Sort(out[t])
	}
	return out, nil
}
