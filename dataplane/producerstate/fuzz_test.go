package producerstate_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sluicemq/sluice/dataplane/producerstate"
)

// FuzzProducerStateUnmarshal feeds arbitrary bytes to UnmarshalBinary: it
// must never panic, must classify every failure as ErrCorruptSnapshot, and
// bytes it accepts must be the canonical encoding of the state they decode
// to.
func FuzzProducerStateUnmarshal(f *testing.F) {
	for _, s := range []*producerstate.State{producerstate.New(), checkState(), randomState(rand.New(rand.NewPCG(3, 4)))} {
		data, err := s.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data[:len(data)/2], true)
	}
	f.Add([]byte{}, false)
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC && len(data) >= 4 {
			// Let the fuzzer past the CRC to reach the field checks.
			data = withCRC(data)
		}
		var s producerstate.State
		if err := s.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, producerstate.ErrCorruptSnapshot) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, again) {
			t.Fatalf("accepted %x, re-encodes to %x", data, again)
		}
		for _, pid := range s.ProducerIDs() {
			e, _ := s.Producer(pid)
			if len(e.Batches) < 1 || len(e.Batches) > producerstate.MaxCachedBatches {
				t.Fatalf("producer %d has %d batches", pid, len(e.Batches))
			}
			// Check must not panic on any decoded state.
			last := e.Batches[len(e.Batches)-1]
			_, _ = s.Check(pid, e.Epoch, last.BaseSequence&0x7fffffff, last.LastSequence&0x7fffffff)
		}
	})
}
