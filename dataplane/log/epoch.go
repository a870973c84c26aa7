package log

import (
	"github.com/sluicemq/sluice/record"

	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// UndefinedEpoch and UndefinedOffset are returned by EndOffsetFor when the
// answer is unknown, as in Kafka's OffsetsForLeaderEpoch.
const (
	UndefinedEpoch  int32 = -1
	UndefinedOffset int64 = -1
)

// EpochEntry says that leader epoch Epoch wrote its first batch at StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// epochCache is the leader-epoch cache, owned by the writer (under writeMu).
// Its entries slice is never modified in place (every change makes a new
// backing array or shortens it), so readers use the slice published in the
// view without a lock.
type epochCache struct {
	entries []EpochEntry // epochs and start offsets strictly increase
}

func (c *epochCache) latest() (EpochEntry, bool) {
	if len(c.entries) == 0 {
		return EpochEntry{}, false
	}
	return c.entries[len(c.entries)-1], true
}

// assign records that epoch starts at offset. It reports whether the cache
// changed. An epoch at or below the latest one is ignored when its start is
// not below the latest start (the normal case of a batch inside the current
// epoch); callers reject stale epochs before calling.
func (c *epochCache) assign(epoch int32, offset int64) bool {
	if l, ok := c.latest(); ok && epoch <= l.Epoch {
		return false
	}
	// A new epoch starting at or before existing entries overrides them
	// (those epochs wrote nothing that is still in the log).
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= offset {
		n--
	}
	c.entries = append(c.entries[:n:n], EpochEntry{Epoch: epoch, StartOffset: offset})
	return true
}

// truncateFromEnd removes the epochs that start at or after end.
func (c *epochCache) truncateFromEnd(end int64) bool {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= end {
		n--
	}
	if n == len(c.entries) {
		return false
	}
	c.entries = c.entries[:n:n]
	return true
}

// truncateFromStart drops the epochs that end before start and moves the
// start of the epoch containing start up to start.
func (c *epochCache) truncateFromStart(start int64) bool {
	i := 0
	for i+1 < len(c.entries) && c.entries[i+1].StartOffset <= start {
		i++
	}
	changed := i > 0
	rest := append([]EpochEntry(nil), c.entries[i:]...)
	if len(rest) > 0 && rest[0].StartOffset < start {
		rest[0].StartOffset = start
		changed = true
	}
	if changed {
		c.entries = rest
	}
	return changed
}

// endOffsetFor implements Kafka's OffsetsForLeaderEpoch (KIP-101, KIP-279):
// for the latest epoch it returns the LEO; otherwise the largest epoch at or
// below the requested one and the start offset of the first epoch above it.
func endOffsetFor(entries []EpochEntry, epoch int32, leo int64) (int32, int64) {
	if epoch == UndefinedEpoch || len(entries) == 0 {
		return UndefinedEpoch, UndefinedOffset
	}
	if entries[len(entries)-1].Epoch == epoch {
		return epoch, leo
	}
	// First entry with Epoch > epoch.
	hi := 0
	for hi < len(entries) && entries[hi].Epoch <= epoch {
		hi++
	}
	if hi == len(entries) {
		return UndefinedEpoch, UndefinedOffset
	}
	if hi == 0 {
		return epoch, entries[0].StartOffset
	}
	return entries[hi-1].Epoch, entries[hi].StartOffset
}

const epochCheckpointName = "leader-epoch-checkpoint"

// encodeEpochs renders the checkpoint file: a version line, a count line and
// one "epoch startOffset" line per entry (Kafka's format).
func encodeEpochs(entries []EpochEntry) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return b.Bytes()
}

// decodeEpochs parses a checkpoint file, checking the ordering invariant.
func decodeEpochs(b []byte) ([]EpochEntry, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return sc.Text(), true
	}
	v, ok := line()
	if !ok || v != "0" {
		return nil, fmt.Errorf("epoch checkpoint version %q: %w", v, record.ErrCorrupt)
	}
	cs, _ := line()
	count, err := strconv.Atoi(cs)
	if err != nil || count < 0 || count > len(b) {
		return nil, fmt.Errorf("epoch checkpoint count %q: %w", cs, record.ErrCorrupt)
	}
	entries := make([]EpochEntry, 0, count)
	for i := range count {
		l, ok := line()
		if !ok {
			return nil, fmt.Errorf("epoch checkpoint has %d of %d entries: %w", i, count, record.ErrCorrupt)
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			return nil, fmt.Errorf("epoch checkpoint line %q: %w", l, record.ErrCorrupt)
		}
		e, err1 := strconv.ParseInt(f[0], 10, 32)
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || e < 0 || o < 0 {
			return nil, fmt.Errorf("epoch checkpoint line %q: %w", l, record.ErrCorrupt)
		}
		if n := len(entries); n > 0 && (int32(e) <= entries[n-1].Epoch || o <= entries[n-1].StartOffset) {
			return nil, fmt.Errorf("epoch checkpoint line %q out of order: %w", l, record.ErrCorrupt)
		}
		entries = append(entries, EpochEntry{Epoch: int32(e), StartOffset: o})
	}
	if _, extra := line(); extra {
		return nil, fmt.Errorf("epoch checkpoint has extra lines: %w", record.ErrCorrupt)
	}
	return entries, nil
}

// WriteFileAtomic replaces path with data durably: write a temporary file,
// fsync it, rename it over path and fsync the directory.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := writeFileSync(tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory, making the creation, renaming and removal of
// its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
