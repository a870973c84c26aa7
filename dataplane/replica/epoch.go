package replica

import (
	"fmt"
	"slices"
)

// UndefinedEpoch and UndefinedOffset mean "unknown" in an epoch end offset
// answer, as in Kafka's OffsetsForLeaderEpoch.
const (
	UndefinedEpoch  int32 = -1
	UndefinedOffset int64 = -1
)

// EpochEntry says that leader epoch Epoch wrote its first batch at
// StartOffset. It mirrors the partition log's leader-epoch cache entry.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// EpochEndOffset is an answer to "where does epoch E end in your log": the
// largest epoch at or below E that the log knows and the offset one past its
// last record (Kafka's OffsetsForLeaderEpoch response, KIP-101/KIP-279).
type EpochEndOffset struct {
	Epoch     int32
	EndOffset int64
}

// Undefined reports whether the answer is "unknown".
func (e EpochEndOffset) Undefined() bool {
	return e.Epoch == UndefinedEpoch || e.EndOffset == UndefinedOffset
}

// LogState is what the state machines need to know about a local log: its
// log end offset, its leader-epoch cache (oldest first) and how much of it
// is durable. The caller reads it from the log before each call; the state
// machines never keep it.
type LogState struct {
	LEO    int64
	Epochs []EpochEntry
	// Durable is the end of the log's durable prefix (at most LEO): every
	// batch below it survives a crash of this broker under the flush
	// policy (after an fsync with "always" and "interval"; at once with
	// "os", which trusts the page cache). Only durable offsets count
	// toward the high watermark, so what is committed survives even a
	// crash of every replica at once when the policy syncs.
	Durable int64
}

// LatestEpoch returns the epoch of the last batch in the log, or
// UndefinedEpoch when the log has no epochs.
func (s LogState) LatestEpoch() int32 {
	if len(s.Epochs) == 0 {
		return UndefinedEpoch
	}
	return s.Epochs[len(s.Epochs)-1].Epoch
}

// EndOffsetFor answers OffsetsForLeaderEpoch for a log with leader-epoch
// cache entries and log end offset leo, with the same semantics as the
// partition log's EndOffsetFor: for the latest epoch, the LEO; for an older
// epoch, the largest known epoch at or below it and the start offset of the
// first epoch above it; for an epoch below every known one, that epoch and
// the first start offset; undefined when there are no entries, epoch is
// UndefinedEpoch, or epoch is above every entry.
func EndOffsetFor(entries []EpochEntry, epoch int32, leo int64) EpochEndOffset {
	undefined := EpochEndOffset{Epoch: UndefinedEpoch, EndOffset: UndefinedOffset}
	if epoch == UndefinedEpoch || len(entries) == 0 {
		return undefined
	}
	if entries[len(entries)-1].Epoch == epoch {
		return EpochEndOffset{Epoch: epoch, EndOffset: leo}
	}
	hi := 0 // first entry with Epoch > epoch
	for hi < len(entries) && entries[hi].Epoch <= epoch {
		hi++
	}
	switch hi {
	case len(entries):
		return undefined
	case 0:
		return EpochEndOffset{Epoch: epoch, EndOffset: entries[0].StartOffset}
	}
	return EpochEndOffset{Epoch: entries[hi-1].Epoch, EndOffset: entries[hi].StartOffset}
}

// checkEpochs validates the cache ordering invariant: epochs and start
// offsets strictly increase, and every start offset is in [0, leo].
func checkEpochs(entries []EpochEntry, leo int64) error {
	for i, e := range entries {
		if e.Epoch < 0 || e.StartOffset < 0 || e.StartOffset > leo {
			return fmt.Errorf("epoch entry %d (%d@%d) outside [0, LEO %d]: %w", i, e.Epoch, e.StartOffset, leo, ErrInvalid)
		}
		if i > 0 && (e.Epoch <= entries[i-1].Epoch || e.StartOffset <= entries[i-1].StartOffset) {
			return fmt.Errorf("epoch entry %d (%d@%d) not after %d@%d: %w",
				i, e.Epoch, e.StartOffset, entries[i-1].Epoch, entries[i-1].StartOffset, ErrInvalid)
		}
	}
	return nil
}

// assignEpoch returns entries with epoch starting at offset, dropping the
// entries that start at or after offset (they wrote nothing that remains).
// It leaves entries unchanged when epoch is already the latest.
func assignEpoch(entries []EpochEntry, epoch int32, offset int64) []EpochEntry {
	if n := len(entries); n > 0 && entries[n-1].Epoch >= epoch {
		return slices.Clone(entries)
	}
	n := len(entries)
	for n > 0 && entries[n-1].StartOffset >= offset {
		n--
	}
	return append(slices.Clone(entries[:n]), EpochEntry{Epoch: epoch, StartOffset: offset})
}
