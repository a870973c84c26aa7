package partition

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/dataplane/log"
)

// HWCheckpointName is the broker's high-watermark checkpoint, one file in
// its data directory holding the HW of every partition replica it keeps
// there (Kafka's replication-offset-checkpoint), so readers never see the
// HW go back after a restart, and a follower knows which of its records
// are committed. The format is in the package doc (High-watermark
// checkpoint).
const HWCheckpointName = "replication-offset-checkpoint"

// hwCheckpointHeader is the first line of the broker's checkpoint, with
// its format version.
const hwCheckpointHeader = "sluice-replication-offset-checkpoint 1"

// ErrHWCheckpointCorrupt is returned by ReadHWCheckpoint for a file that
// is not a checkpoint this version wrote: damaged (a checksum or syntax
// failure) or of an unknown version.
var ErrHWCheckpointCorrupt = errors.New("high watermark checkpoint is corrupt")

// HWKey names a partition in the broker's HW checkpoint: topic ids are
// never reused, so they name partitions across tenants.
type HWKey struct {
	TopicID   string
	Partition int32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteHWCheckpoint replaces the broker's checkpoint at path with hws,
// atomically and durably (a temporary file, fsynced, renamed over path,
// and the directory fsynced): after a crash the file holds either the old
// or the new content, whole.
func WriteHWCheckpoint(path string, hws map[HWKey]int64) error {
	keys := slices.SortedFunc(func(yield func(HWKey) bool) {
		for k := range hws {
			if !yield(k) {
				return
			}
		}
	}, func(a, b HWKey) int {
		return cmp.Or(strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
	})
	var b bytes.Buffer
	b.Grow(64 + 56*len(keys))
	b.WriteString(hwCheckpointHeader + "\n")
	b.WriteString(strconv.Itoa(len(keys)) + "\n")
	for _, k := range keys {
		hw := hws[k]
		if k.TopicID == "" || strings.ContainsAny(k.TopicID, " \t\r\n") || k.Partition < 0 || hw < 0 {
			return fmt.Errorf("write high watermark checkpoint: bad entry %q %d %d", k.TopicID, k.Partition, hw)
		}
		fmt.Fprintf(&b, "%s %d %d\n", k.TopicID, k.Partition, hw)
	}
	b.WriteString(checksumLine(b.Bytes()))
	if err := log.WriteFileAtomic(path, b.Bytes()); err != nil {
		return fmt.Errorf("write high watermark checkpoint: %w", err)
	}
	return nil
}

// ReadHWCheckpoint reads the broker's checkpoint at path: the HW of every
// partition it holds, none when there is no file yet (a new data
// directory, or one of a broker version that kept a checkpoint per
// partition). A file that fails its checks is an error matching
// ErrHWCheckpointCorrupt.
func ReadHWCheckpoint(path string) (map[HWKey]int64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[HWKey]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read high watermark checkpoint: %w", err)
	}
	hws, err := parseHWCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrHWCheckpointCorrupt, path, err)
	}
	return hws, nil
}

func parseHWCheckpoint(data []byte) (map[HWKey]int64, error) {
	body, sum, ok := splitChecksum(data)
	if !ok {
		return nil, errors.New("no checksum line at the end")
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("checksum %08x, the content's is %08x", sum, got)
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if lines[0] != hwCheckpointHeader {
		return nil, fmt.Errorf("header %q: this broker reads %q", lines[0], hwCheckpointHeader)
	}
	if len(lines) < 2 {
		return nil, errors.New("no entry count")
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n != len(lines)-2 {
		return nil, fmt.Errorf("entry count %q for %d entries", lines[1], len(lines)-2)
	}
	hws := make(map[HWKey]int64, n)
	for i, line := range lines[2:] {
		f := strings.Split(line, " ")
		if len(f) != 3 || f[0] == "" {
			return nil, fmt.Errorf("entry %d: %q is not <topic id> <partition> <hw>", i+1, line)
		}
		p, perr := strconv.ParseInt(f[1], 10, 32)
		hw, herr := strconv.ParseInt(f[2], 10, 64)
		if perr != nil || herr != nil || p < 0 || hw < 0 {
			return nil, fmt.Errorf("entry %d: %q is not <topic id> <partition> <hw>", i+1, line)
		}
		k := HWKey{f[0], int32(p)}
		if _, dup := hws[k]; dup {
			return nil, fmt.Errorf("entry %d: partition %s/%d listed twice", i+1, k.TopicID, k.Partition)
		}
		hws[k] = hw
	}
	return hws, nil
}

// checksumLine is the last line of a checkpoint whose lines before are
// body.
func checksumLine(body []byte) string {
	return fmt.Sprintf("crc32c %08x\n", crc32.Checksum(body, castagnoli))
}

// splitChecksum splits a checkpoint into its body and the checksum of its
// last line, "crc32c <8 hex digits>\n".
func splitChecksum(data []byte) (body []byte, sum uint32, ok bool) {
	const prefix, lineLen = "crc32c ", len("crc32c 01234567\n")
	if len(data) < lineLen || data[len(data)-1] != '\n' {
		return nil, 0, false
	}
	line := data[len(data)-lineLen : len(data)-1]
	hex, found := bytes.CutPrefix(line, []byte(prefix))
	if !found {
		return nil, 0, false
	}
	v, err := strconv.ParseUint(string(hex), 16, 32)
	if err != nil {
		return nil, 0, false
	}
	return data[:len(data)-lineLen], uint32(v), true
}

// legacyHWName is the per-partition HW checkpoint of brokers before the
// broker-wide one (HWCheckpointName): Open reads it for a partition the
// broker's checkpoint does not hold, and HWCheckpointed removes it once
// the broker's checkpoint holds that partition durably.
const legacyHWName = "high-watermark"

// readLegacyHW returns the HW in a partition directory's legacy
// checkpoint file and whether there is one.
func readLegacyHW(dir string) (hw int64, exists bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, legacyHWName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, true, err
	}
	hw, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || hw < 0 {
		return 0, true, fmt.Errorf("bad high watermark checkpoint %q in %s", b, dir)
	}
	return hw, true, nil
}

// HWCheckpointed tells the replica that a durable broker checkpoint holds
// its HW: the legacy per-partition file Open found, if any, is removed
// (nothing reads it any more while the broker's checkpoint holds the
// partition).
func (p *Replica) HWCheckpointed() error {
	if !p.legacyHW.Load() {
		return nil
	}
	if err := os.Remove(filepath.Join(p.dir, legacyHWName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the legacy high watermark checkpoint: %w", err)
	}
	p.legacyHW.Store(false)
	return nil
}
