package hwcheckpoint

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/dataplane/log"
)

// Name is the broker's high-watermark checkpoint, one file in its data
// directory holding the HW of every partition replica it keeps there
// (Kafka's replication-offset-checkpoint), so readers never see the HW go
// back after a restart, and a follower knows which of its records are
// committed. The format is in the package doc.
const Name = "replication-offset-checkpoint"

// header is the first line of the broker's checkpoint, with its format
// version.
const header = "sluice-replication-offset-checkpoint 1"

// ErrCorrupt is returned by Read for a file that is not a checkpoint this
// version wrote: damaged (a checksum or syntax failure) or of an unknown
// version.
var ErrCorrupt = errors.New("high watermark checkpoint is corrupt")

// Key names a partition in the broker's HW checkpoint: topic ids are never
// reused, so they name partitions across tenants.
type Key struct {
	TopicID   string
	Partition int32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Write replaces the broker's checkpoint at path with hws,
// atomically and durably (a temporary file, fsynced, renamed over path,
// and the directory fsynced): after a crash the file holds either the old
// or the new content, whole.
func Write(path string, hws map[Key]int64) error {
	keys := slices.SortedFunc(func(yield func(Key) bool) {
		for k := range hws {
			if !yield(k) {
				return
			}
		}
	}, func(a, b Key) int {
		return cmp.Or(strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
	})
	var b bytes.Buffer
	b.Grow(64 + 56*len(keys))
	b.WriteString(header + "\n")
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

// Read reads the broker's checkpoint at path: the HW of every partition it
// holds, none when there is no file yet (a new data directory, or one of a
// broker version that kept a checkpoint per partition). A file that fails
// its checks is an error matching ErrCorrupt.
func Read(path string) (map[Key]int64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[Key]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read high watermark checkpoint: %w", err)
	}
	hws, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return hws, nil
}

func parse(data []byte) (map[Key]int64, error) {
	body, sum, ok := splitChecksum(data)
	if !ok {
		return nil, errors.New("no checksum line at the end")
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("checksum %08x, the content's is %08x", sum, got)
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if lines[0] != header {
		return nil, fmt.Errorf("header %q: this broker reads %q", lines[0], header)
	}
	if len(lines) < 2 {
		return nil, errors.New("no entry count")
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n != len(lines)-2 {
		return nil, fmt.Errorf("entry count %q for %d entries", lines[1], len(lines)-2)
	}
	hws := make(map[Key]int64, n)
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
		k := Key{f[0], int32(p)}
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
