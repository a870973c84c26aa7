package store

// PartitionUpdate is one compare-and-set of a batched partition write
// (UpdatePartitions, UpdatePartitionsFenced): Partition replaces the stored
// state of its partition if the stored PartitionEpoch is still
// ExpectedEpoch.
type PartitionUpdate struct {
	Partition     Partition
	ExpectedEpoch int32
}
