package partition

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/dataplane/log"
)

// hwCheckpointName is the file in a partition's directory that remembers
// its high watermark across restarts (Kafka's replication-offset-checkpoint),
// so readers never see the HW go back after a restart, and a follower knows
// which of its records are committed.
const hwCheckpointName = "high-watermark"

// readHW returns the checkpointed high watermark of a partition directory,
// 0 when there is none.
func readHW(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, hwCheckpointName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	hw, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || hw < 0 {
		return 0, fmt.Errorf("bad high watermark checkpoint %q in %s", b, dir)
	}
	return hw, nil
}

// writeHW replaces the checkpoint atomically and durably.
func writeHW(dir string, hw int64) error {
	return log.WriteFileAtomic(filepath.Join(dir, hwCheckpointName), []byte(strconv.FormatInt(hw, 10)+"\n"))
}

// CheckpointHW writes the replica's HW to its checkpoint file when it
// moved since the last write (atomically and durably, outside the replica
// lock). Open reads it back.
func (p *Replica) CheckpointHW() error {
	p.mu.Lock()
	hw, last := p.hwLocked(), p.savedHW
	p.mu.Unlock()
	if hw == last {
		return nil
	}
	if err := writeHW(p.dir, hw); err != nil {
		return err
	}
	p.mu.Lock()
	p.savedHW = hw
	p.mu.Unlock()
	return nil
}
