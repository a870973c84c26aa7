package partition

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// legacyHWName is the per-partition HW checkpoint of brokers before the
// broker-wide one (hwcheckpoint.Name): Open reads it for a partition the
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
