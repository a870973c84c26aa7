package producerstate_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/sluicemq/sluice/dataplane/producerstate"
)

// FuzzProducerStateUnmarshal feeds arbitrary bytes to UnmarshalBinary: it
// must never panic, must classify every failure as ErrCorruptSnapshot, and
// version 2 bytes it accepts must be the canonical encoding of the state
// they decode to (version 1 ones: re-encode to a version 2 of the same
// state).
func FuzzProducerStateUnmarshal(f *testing.F) {
	for _, s := range []*producerstate.State{producerstate.New(), checkState(), randomState(rand.New(rand.NewPCG(3, 4)))} {
		data, err := s.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data[:len(data)/2], true)
	}
	if v1, err := os.ReadFile("testdata/v1.snapshot"); err == nil {
		f.Add(v1, false)
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
		if data[0] == 1 {
			// Version 1 re-encodes as version 2, which decodes to the same state.
			var s2 producerstate.State
			if err := s2.UnmarshalBinary(again); err != nil {
				t.Fatalf("version 2 of accepted version 1: %v", err)
			}
			if !reflect.DeepEqual(&s, &s2) {
				t.Fatalf("version 1 %x and its version 2 %x decode differently", data, again)
			}
		} else if !bytes.Equal(data, again) {
			t.Fatalf("accepted %x, re-encodes to %x", data, again)
		}
		first, ok := s.FirstUnstableOffset()
		ongoing := s.OngoingTransactions()
		if ok != (len(ongoing) > 0) || ok && first != ongoing[0].FirstOffset {
			t.Fatalf("first unstable offset %d %v, ongoing %v", first, ok, ongoing)
		}
		for i := 1; i < len(ongoing); i++ {
			if ongoing[i].FirstOffset <= ongoing[i-1].FirstOffset {
				t.Fatalf("ongoing transactions out of order: %v", ongoing)
			}
		}
		_ = s.AbortedTransactions(0, s.Offset())
		for _, pid := range s.ProducerIDs() {
			e, _ := s.Producer(pid)
			if len(e.Batches) > producerstate.MaxCachedBatches || data[0] == 1 && len(e.Batches) < 1 {
				t.Fatalf("producer %d has %d batches", pid, len(e.Batches))
			}
			// Check must not panic on any decoded state.
			base, last := int32(0), int32(0)
			if len(e.Batches) > 0 {
				b := e.Batches[len(e.Batches)-1]
				base, last = b.BaseSequence&0x7fffffff, b.LastSequence&0x7fffffff
			}
			_, _ = s.Check(pid, e.Epoch, base, last)
			_, _ = s.CheckTransactional(pid, e.Epoch, base, last, true)
			_ = s.CheckMarker(pid, e.Epoch, e.CoordinatorEpoch)
		}
		s.Apply(producerstate.Batch{ProducerID: 1, Control: true, FirstOffset: s.Offset(), LastOffset: s.Offset()})
	})
}
