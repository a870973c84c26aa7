package producerstate

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/dataplane/log"
)

// ErrCorruptSnapshot: snapshot bytes that do not decode: a bad CRC, an
// unknown version, a wrong length or an impossible field.
var ErrCorruptSnapshot = errors.New("corrupt producer state snapshot")

// Snapshot format; the package doc shows the layout.
const (
	snapshotVersion1  = 1
	snapshotVersion   = 2
	snapshotExt       = ".snapshot"
	snapshotFixedSize = 1 + 8 + 4 + 4 // version, offset, producer count, crc
	entryHeaderSizeV1 = 8 + 2 + 1     // producer id, epoch, batch count
	// producer id, epoch, coordinator epoch, txn first offset, last
	// timestamp, batch count
	entryHeaderSize = 8 + 2 + 4 + 8 + 8 + 1
	batchEntrySize  = 4 + 4 + 8 + 8 + 8
	abortedSize     = 8 + 8 + 8 + 8 // producer id, first, last, LSO
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MarshalBinary encodes the state and its Offset in the snapshot format
// (version 2). It never fails.
func (s *State) MarshalBinary() ([]byte, error) { return s.encode(s.offset), nil }

// UnmarshalBinary replaces s with the state encoded in data (version 1 or
// 2), including its Offset. On error (ErrCorruptSnapshot) s is unchanged.
// It never panics and allocates no more than the size of data justifies.
func (s *State) UnmarshalBinary(data []byte) error {
	d, err := decode(data)
	if err != nil {
		return err
	}
	*s = *d
	return nil
}

func (s *State) encode(offset int64) []byte {
	ids := s.ProducerIDs()
	size := snapshotFixedSize + 4 + abortedSize*len(s.aborted)
	for _, pid := range ids {
		size += entryHeaderSize + batchEntrySize*len(s.producers[pid].Batches)
	}
	b := make([]byte, 0, size)
	b = append(b, snapshotVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, pid := range ids {
		e := s.producers[pid]
		b = binary.BigEndian.AppendUint64(b, uint64(pid))
		b = binary.BigEndian.AppendUint16(b, uint16(e.Epoch))
		b = binary.BigEndian.AppendUint32(b, uint32(e.CoordinatorEpoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.TxnFirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(e.lastTimestamp))
		b = append(b, byte(len(e.Batches)))
		for _, c := range e.Batches {
			b = binary.BigEndian.AppendUint32(b, uint32(c.BaseSequence))
			b = binary.BigEndian.AppendUint32(b, uint32(c.LastSequence))
			b = binary.BigEndian.AppendUint64(b, uint64(c.FirstOffset))
			b = binary.BigEndian.AppendUint64(b, uint64(c.LastOffset))
			b = binary.BigEndian.AppendUint64(b, uint64(c.MaxTimestamp))
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.aborted)))
	for _, t := range s.aborted {
		b = binary.BigEndian.AppendUint64(b, uint64(t.ProducerID))
		b = binary.BigEndian.AppendUint64(b, uint64(t.FirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(t.LastOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(t.LastStableOffset))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorruptSnapshot)
}

func decode(data []byte) (*State, error) {
	if len(data) < snapshotFixedSize {
		return nil, corrupt("%d bytes, need at least %d", len(data), snapshotFixedSize)
	}
	version := data[0]
	if version != snapshotVersion1 && version != snapshotVersion {
		return nil, corrupt("unknown version %d", data[0])
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, corrupt("crc %08x, trailer says %08x", got, sum)
	}
	offset := int64(binary.BigEndian.Uint64(body[1:]))
	n := binary.BigEndian.Uint32(body[9:])
	b := body[13:]
	if offset < 0 {
		return nil, corrupt("negative offset %d", offset)
	}
	// Every entry takes at least its header (and in version 1 one batch);
	// this bounds the map size.
	headerSize, minBatches := entryHeaderSize, 0
	if version == snapshotVersion1 {
		headerSize, minBatches = entryHeaderSizeV1, 1
	}
	if uint64(n)*uint64(headerSize+minBatches*batchEntrySize) > uint64(len(b)) {
		return nil, corrupt("%d producers in %d bytes", n, len(b))
	}
	s := &State{producers: make(map[int64]*Entry, n), offset: offset}
	prev := int64(-1)
	for i := range n {
		if len(b) < headerSize {
			return nil, corrupt("producer %d truncated", i)
		}
		pid := int64(binary.BigEndian.Uint64(b))
		e := &Entry{Epoch: int16(binary.BigEndian.Uint16(b[8:])), TxnFirstOffset: -1, CoordinatorEpoch: -1}
		if version == snapshotVersion1 {
			b = b[10:]
		} else {
			e.CoordinatorEpoch = int32(binary.BigEndian.Uint32(b[10:]))
			e.TxnFirstOffset = int64(binary.BigEndian.Uint64(b[14:]))
			e.lastTimestamp = int64(binary.BigEndian.Uint64(b[22:]))
			b = b[30:]
		}
		k := int(b[0])
		b = b[1:]
		if pid <= prev {
			return nil, corrupt("producer id %d after %d", pid, prev)
		}
		prev = pid
		if k < minBatches || k > MaxCachedBatches {
			return nil, corrupt("producer %d has %d batches", pid, k)
		}
		if e.CoordinatorEpoch < -1 {
			return nil, corrupt("producer %d has coordinator epoch %d", pid, e.CoordinatorEpoch)
		}
		if e.TxnFirstOffset < -1 || e.TxnFirstOffset >= offset {
			return nil, corrupt("producer %d has a transaction from offset %d in a snapshot at %d", pid, e.TxnFirstOffset, offset)
		}
		if len(b) < k*batchEntrySize {
			return nil, corrupt("producer %d batches truncated", pid)
		}
		e.Batches = make([]Batch, k, MaxCachedBatches)
		for j := range e.Batches {
			c := Batch{
				ProducerID:    pid,
				ProducerEpoch: e.Epoch,
				BaseSequence:  int32(binary.BigEndian.Uint32(b)),
				LastSequence:  int32(binary.BigEndian.Uint32(b[4:])),
				FirstOffset:   int64(binary.BigEndian.Uint64(b[8:])),
				LastOffset:    int64(binary.BigEndian.Uint64(b[16:])),
				MaxTimestamp:  int64(binary.BigEndian.Uint64(b[24:])),
			}
			b = b[batchEntrySize:]
			if c.FirstOffset < 0 || c.LastOffset < c.FirstOffset || c.LastOffset >= offset {
				return nil, corrupt("producer %d batch at offsets %d..%d in a snapshot at %d", pid, c.FirstOffset, c.LastOffset, offset)
			}
			e.Batches[j] = c
		}
		if version == snapshotVersion1 {
			e.lastTimestamp = e.Batches[k-1].MaxTimestamp
		}
		if e.TxnFirstOffset >= 0 {
			s.ongoing = append(s.ongoing, OngoingTxn{ProducerID: pid, FirstOffset: e.TxnFirstOffset})
		}
		s.producers[pid] = e
	}
	slices.SortFunc(s.ongoing, func(a, b OngoingTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	if version == snapshotVersion1 {
		if len(b) != 0 {
			return nil, corrupt("%d bytes after the last producer", len(b))
		}
		return s, nil
	}
	if len(b) < 4 {
		return nil, corrupt("aborted transaction count truncated")
	}
	na := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(na)*abortedSize != uint64(len(b)) {
		return nil, corrupt("%d aborted transactions in %d bytes", na, len(b))
	}
	if na > 0 {
		s.aborted = make([]AbortedTxn, na)
	}
	for i := range s.aborted {
		t := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(b)),
			FirstOffset:      int64(binary.BigEndian.Uint64(b[8:])),
			LastOffset:       int64(binary.BigEndian.Uint64(b[16:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(b[24:])),
		}
		b = b[abortedSize:]
		if t.ProducerID < 0 || t.FirstOffset < 0 || t.LastOffset <= t.FirstOffset || t.LastOffset >= offset ||
			t.LastStableOffset < 0 || t.LastStableOffset > t.LastOffset+1 {
			return nil, corrupt("aborted transaction of producer %d at %d..%d (LSO %d) in a snapshot at %d",
				t.ProducerID, t.FirstOffset, t.LastOffset, t.LastStableOffset, offset)
		}
		if i > 0 && t.LastOffset <= s.aborted[i-1].LastOffset {
			return nil, corrupt("aborted transaction marker at %d after %d", t.LastOffset, s.aborted[i-1].LastOffset)
		}
		s.aborted[i] = t
	}
	return s, nil
}

func snapshotName(offset int64) string { return fmt.Sprintf("%020d%s", offset, snapshotExt) }

// Snapshots returns the offsets of the snapshot files in dir, ascending. A
// missing dir has none.
func Snapshots(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list producer state snapshots: %w", err)
	}
	var offs []int64
	for _, e := range ents {
		stem, ok := strings.CutSuffix(e.Name(), snapshotExt)
		if !ok || len(stem) != 20 || !e.Type().IsRegular() {
			continue
		}
		off, err := strconv.ParseInt(stem, 10, 64)
		if err != nil || off < 0 {
			continue
		}
		offs = append(offs, off)
	}
	slices.Sort(offs)
	return offs, nil
}

// WriteSnapshot writes s as the snapshot at offset, the log offset it
// reflects (normally the LEO when s was cloned), to dir/%020d.snapshot,
// replacing any file of that name. It is atomic and durable when it returns
// (temporary file, fsync, rename, directory fsync; the log's Open removes a
// leftover *.tmp when the snapshots share its directory). offset must not be
// below s.Offset(). dir must exist. Calls that change the snapshots of one
// dir (WriteSnapshot, LoadLatest, DeleteAbove, DeleteBelow, Rebuild) must
// not run concurrently, and a snapshot must not be written after a
// truncation below its offset.
func WriteSnapshot(dir string, s *State, offset int64) error {
	if offset < s.offset {
		return fmt.Errorf("write producer state snapshot at %d: the state reflects the log up to %d", offset, s.offset)
	}
	path := filepath.Join(dir, snapshotName(offset))
	if err := log.WriteFileAtomic(path, s.encode(offset)); err != nil {
		return fmt.Errorf("write producer state snapshot %s: %w", path, err)
	}
	return nil
}

// LoadLatest returns the newest snapshot in dir whose offset is at most
// maxOffset, with that offset. A snapshot that cannot be read or decoded is
// removed and the next older one tried: snapshots only save replay work,
// the log is the truth. Without a usable snapshot it returns New() and
// offset 0: an empty state is exactly the state of the log below offset 0,
// so the caller replays from the log start.
func LoadLatest(dir string, maxOffset int64) (*State, int64, error) {
	offs, err := Snapshots(dir)
	if err != nil {
		return nil, 0, err
	}
	for i := len(offs) - 1; i >= 0; i-- {
		off := offs[i]
		if off > maxOffset {
			continue
		}
		path := filepath.Join(dir, snapshotName(off))
		s, err := readSnapshot(path, off)
		if err == nil {
			return s, off, nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("remove unusable producer state snapshot: %w", err)
		}
	}
	return New(), 0, nil
}

func readSnapshot(path string, offset int64) (*State, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := decode(data)
	if err != nil {
		return nil, err
	}
	if s.offset != offset {
		return nil, corrupt("%s holds offset %d", path, s.offset)
	}
	return s, nil
}

// DeleteAbove removes the snapshots with an offset above offset. After the
// log is truncated they describe batches that no longer exist, and a later
// LoadLatest would take them once the log grows past them again; call it
// with the new LEO after every truncation, before appending (Rebuild does
// it too). After a log Reset, DeleteAbove(dir, -1) removes them all. The
// removals are durable when it returns.
func DeleteAbove(dir string, offset int64) error {
	offs, err := Snapshots(dir)
	if err != nil {
		return err
	}
	i := sort.Search(len(offs), func(i int) bool { return offs[i] > offset })
	return remove(dir, offs[i:])
}

// DeleteBelow removes the snapshots with an offset below offset (normally
// the log start offset after retention), except the newest of them, which
// still saves replaying the log from its start. The removals are durable
// when it returns.
func DeleteBelow(dir string, offset int64) error {
	offs, err := Snapshots(dir)
	if err != nil {
		return err
	}
	i, _ := slices.BinarySearch(offs, offset)
	if i == 0 {
		return nil
	}
	return remove(dir, offs[:i-1])
}

func remove(dir string, offs []int64) error {
	if len(offs) == 0 {
		return nil
	}
	for _, off := range offs {
		if err := os.Remove(filepath.Join(dir, snapshotName(off))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove producer state snapshot: %w", err)
		}
	}
	if err := log.SyncDir(dir); err != nil {
		return fmt.Errorf("sync producer state snapshot dir: %w", err)
	}
	return nil
}
