package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// A batch held in the sequence-gap wait whose partition stops being led
// meanwhile is refused as not-leader: it is never appended by a former
// leader, nothing panics, and the partition lock is released.
func TestPartitionGapWaitEndsAfterRoleChange(t *testing.T) {
	for _, acks := range []sluicev1.Acks{sluicev1.Acks_ACKS_ALL, sluicev1.Acks_ACKS_LEADER} {
		t.Run(acks.String(), func(t *testing.T) {
			p := newFollower(t, newTestHost(t), false)
			lead(t, p, 8)
			leo := p.log.LEO()
			b, err := record.AppendBatch(nil, record.BatchHeader{ProducerID: 5, ProducerEpoch: 0, BaseSequence: 3}, []record.Record{{Value: []byte("x")}})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan string, 1)
			go func() {
				defer func() {
					if r := recover(); r != nil {
						done <- fmt.Sprint("PANIC: ", r)
					}
				}()
				_, err := p.Produce(ctx, []log.ValidBatch{validBatch(t, b)}, acks, 5*time.Second, nil)
				done <- fmt.Sprint(err)
			}()
			time.Sleep(100 * time.Millisecond) // in the gap wait: sequence 3 without 0..2
			p.mu.Lock()
			cancel() // the client gives up (as when the 1 s wait ends)
			time.Sleep(50 * time.Millisecond)
			p.role, p.lead = RoleFollower, nil // and the replica stops leading
			p.notifyLocked()
			p.mu.Unlock()
			select {
			case r := <-done:
				require.Contains(t, r, "is not leading the partition", "refused as not-leader")
			case <-time.After(3 * time.Second):
				t.Fatal("produce did not return")
			}
			require.True(t, p.mu.TryLock(), "the partition lock is free")
			p.mu.Unlock()
			require.Equal(t, leo, p.log.LEO(), "nothing appended")
		})
	}
}
