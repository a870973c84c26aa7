package group

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// TopicPartitions is a set of partitions by topic name: topic → partition
// numbers. Everything this package returns holds the partitions of a topic in
// ascending order without duplicates, leaves out topics without partitions,
// and is never nil (an empty set is an empty map). Inputs may be in any order
// and may repeat a partition.
type TopicPartitions map[string][]int32

// Len is the number of partitions in the set.
func (tps TopicPartitions) Len() int {
	n := 0
	for _, ps := range tps {
		n += len(ps)
	}
	return n
}

// Contains reports whether the set holds the partition.
func (tps TopicPartitions) Contains(topic string, partition int32) bool {
	return slices.Contains(tps[topic], partition)
}

// String is the set as "topic:p,p topic:p", topics and partitions ascending,
// or "-" when empty. It is meant for logs and test output.
func (tps TopicPartitions) String() string {
	topics := make([]string, 0, len(tps))
	for t, ps := range tps {
		if len(ps) > 0 {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		return "-"
	}
	slices.Sort(topics)
	var b strings.Builder
	for i, t := range topics {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t)
		b.WriteByte(':')
		ps := slices.Clone(tps[t])
		slices.Sort(ps)
		ps = slices.Compact(ps)
		for j, p := range ps {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(p)))
		}
	}
	return b.String()
}

// tp is one partition of a topic.
type tp struct {
	topic     string
	partition int32
}

func compareTP(a, b tp) int {
	if c := strings.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.partition, b.partition)
}

// partSet is a set of partitions.
type partSet map[tp]struct{}

func (s partSet) has(p tp) bool {
	_, ok := s[p]
	return ok
}

// toSet converts tps; nil stays nil.
func toSet(tps TopicPartitions) partSet {
	if tps == nil {
		return nil
	}
	s := make(partSet, tps.Len())
	for t, ps := range tps {
		for _, p := range ps {
			s[tp{t, p}] = struct{}{}
		}
	}
	return s
}

// sortedKeys returns the partitions of m in ascending order.
func sortedKeys[V any](m map[tp]V) []tp {
	out := make([]tp, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, compareTP)
	return out
}

// topicPartitions builds a TopicPartitions of the partitions of m for
// which keep is true (all of them when keep is nil).
func topicPartitions[V any](m map[tp]V, keep func(V) bool) TopicPartitions {
	out := TopicPartitions{}
	for _, p := range sortedKeys(m) {
		if keep == nil || keep(m[p]) {
			out[p.topic] = append(out[p.topic], p.partition)
		}
	}
	return out
}
