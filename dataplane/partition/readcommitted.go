package partition

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tiered"
)

// lsoLocked is the last stable offset: the first offset of the oldest
// transaction that is ongoing or whose marker is not below the HW yet, or
// the HW when it is lower or there is none; never below the log start. As
// in Kafka, a transaction ends for readers only once its marker is
// committed, so the LSO never goes back when leadership moves to another
// ISR member (which has everything below the HW, markers included).
func (p *Replica) lsoLocked() int64 {
	hw := p.hwLocked()
	lso := hw
	if fuo, ok := p.pstate.FirstUnstableOffset(); ok && fuo < lso {
		lso = fuo
	}
	p.pruneUnreplicatedLocked(hw)
	for _, u := range p.unreplicated {
		lso = min(lso, u.first)
	}
	return max(lso, p.log.LogStartOffset())
}

// pruneUnreplicatedLocked forgets the ended transactions whose marker is
// below hw: they no longer hold the LSO.
func (p *Replica) pruneUnreplicatedLocked(hw int64) {
	n := 0
	for _, u := range p.unreplicated {
		if u.marker >= hw {
			p.unreplicated[n] = u
			n++
		}
	}
	clear(p.unreplicated[n:])
	p.unreplicated = p.unreplicated[:n]
	if n == 0 {
		p.unreplicated = nil
	}
}

// unreplicatedTxn is a transaction whose marker the replica appended but
// the HW has not passed yet: it holds the LSO at its first offset.
type unreplicatedTxn struct {
	first, marker int64
}

// LastStableOffset is the replica's last stable offset (lsoLocked).
func (p *Replica) LastStableOffset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lsoLocked()
}

// ReaderOffsets is ReaderHW with the last stable offset at the same
// moment.
func (p *Replica) ReaderOffsets() (hw, lso int64, _ error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != RoleLeader || p.lead == nil {
		return 0, 0, p.notLeader(p.meta)
	}
	if p.lead.HW() < p.lead.EpochStartOffset() {
		return 0, 0, ErrHWCatchingUp
	}
	return p.lead.HW(), p.lsoLocked(), nil
}

// FetchOptions are a client fetch's parameters (FetchRecords).
type FetchOptions struct {
	MaxBytes int
	// Wait is the longest a fetch at the end waits for records.
	Wait time.Duration
	// ClientEpoch, when set, fences as in Produce.
	ClientEpoch *int32
	// ReadCommitted: only records below the last stable offset, without
	// the batches of aborted transactions.
	ReadCommitted bool
	// Unfiltered keeps control batches and, with ReadCommitted, the
	// batches of aborted transactions, and answers the aborted
	// transactions instead (Fetched.Aborted), for clients that filter
	// themselves (Kafka's).
	Unfiltered bool
}

// Fetched is what FetchRecords returns.
type Fetched struct {
	// Data holds whole batches, never control batches (transaction
	// markers), and with ReadCommitted none of an aborted transaction.
	Data []byte
	// Next is the offset after the last batch read, dropped batches
	// included, or the fetch offset when none was read: where the
	// client fetches next, so that a range of only markers or aborted
	// batches never stalls it.
	Next int64
	// HW and LSO are the high watermark and the last stable offset.
	HW, LSO int64
	// Aborted, with Unfiltered and ReadCommitted, are the aborted
	// transactions the data may hold batches of.
	Aborted []producerstate.AbortedTxn
}

// Fetch is FetchRecords with read_uncommitted: the batches from offset
// below the HW (markers dropped) and the HW.
func (p *Replica) Fetch(ctx context.Context, offset int64, maxBytes int, wait time.Duration, clientEpoch *int32) ([]byte, int64, error) {
	f, err := p.FetchRecords(ctx, offset, FetchOptions{MaxBytes: maxBytes, Wait: wait, ClientEpoch: clientEpoch})
	return f.Data, f.HW, err
}

// FetchRecords returns, on the leader, the whole batches from offset that
// lie below the high watermark, or with o.ReadCommitted below the last
// stable offset (from the object store below the local log start of a
// tiered replica), waiting up to o.Wait for some to arrive (for the LSO
// to pass offset, with ReadCommitted). Control batches are dropped, and
// with ReadCommitted the batches of aborted transactions (the producer
// state's aborted list over the range, read under the lock with the
// LSO). The errors are domain errors; o.ClientEpoch fences as in Produce.
func (p *Replica) FetchRecords(ctx context.Context, offset int64, o FetchOptions) (Fetched, error) {
	var timer *time.Timer
	for {
		p.mu.Lock()
		if err := p.checkClientEpochLocked(o.ClientEpoch); err != nil {
			p.mu.Unlock()
			return Fetched{}, err
		}
		f := Fetched{Next: offset, HW: p.hwLocked(), LSO: p.lsoLocked()}
		ch, isLeader, meta, abortedKnown := p.hwCh, p.role == RoleLeader && p.lead != nil, p.meta, p.abortedKnown
		catchingUp := isLeader && p.lead.HW() < p.lead.EpochStartOffset()
		bound := f.HW
		var aborted []producerstate.AbortedTxn
		if o.ReadCommitted {
			bound = f.LSO
			if offset < bound {
				// Under the lock with the LSO: retention may drop the
				// list's entries once the read below has the data.
				aborted = p.pstate.AbortedTransactions(offset, bound)
			}
		}
		p.mu.Unlock()
		if !isLeader {
			return f, p.notLeader(meta)
		}
		if catchingUp {
			return f, ErrHWCatchingUp
		}
		start, leo := p.log.LogStartOffset(), p.log.LEO()
		if offset < start && p.tiered {
			tp := tiered.Partition{TenantID: p.tenantID, TopicID: p.topicID, Partition: p.id, LeaderEpoch: meta.LeaderEpoch}
			if o.ReadCommitted {
				var err error
				if aborted, err = p.remoteAborted(ctx, tp, offset, aborted, abortedKnown); err != nil {
					return f, err
				}
			}
			data, err := p.readRemote(ctx, tp, offset, o.MaxBytes)
			if err != nil {
				return f, err
			}
			f.Data, f.Next = keepBatches(data, offset, bound, aborted, o.ReadCommitted, o.Unfiltered)
			if o.Unfiltered {
				f.Aborted = aborted
			}
			return f, nil
		}
		if offset < start || offset > leo {
			return f, offsetOutOfRange(&log.OffsetOutOfRangeError{Offset: offset, LogStart: start, LEO: leo})
		}
		if offset < bound {
			data, err := p.log.Read(offset, o.MaxBytes)
			if err != nil {
				return f, logError(err)
			}
			f.Data, f.Next = keepBatches(data, offset, bound, aborted, o.ReadCommitted, o.Unfiltered)
			if o.Unfiltered {
				f.Aborted = aborted
			}
			return f, nil
		}
		if o.Wait <= 0 {
			return f, nil
		}
		if timer == nil {
			timer = time.NewTimer(o.Wait)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			return f, nil
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
}

// remoteAborted returns the aborted transactions a read_committed read of
// the object store at offset filters: those of the index of the segment
// holding offset (which the read serves from) and the in-memory ones
// (mem). A segment without an index (copied from a replica without them)
// is filtered with mem alone, which this replica knows only from
// abortedKnown on: below, the read is refused.
func (p *Replica) remoteAborted(ctx context.Context, tp tiered.Partition, offset int64, mem []producerstate.AbortedTxn, abortedKnown int64) ([]producerstate.AbortedTxn, error) {
	b, ok, err := p.h.Tier.TxnIndex(ctx, tp, offset)
	switch {
	case errors.Is(err, tiered.ErrNotRemote):
		return mem, nil // the read answers it
	case err != nil && ctx.Err() == nil:
		return nil, derr.New(derr.StorageUnavailable, "read the aborted-transaction index of offset %d from the object store: %w", offset, err)
	case err != nil:
		return nil, err
	case !ok && offset < abortedKnown:
		return nil, errAbortedUnknown(offset, abortedKnown)
	case !ok:
		return mem, nil
	}
	idx, err := producerstate.DecodeAbortedIndex(b)
	if err != nil {
		return nil, derr.New(derr.CorruptData, "offset %d is in a remote segment whose aborted-transaction index fails its checks; it is not served read_committed: %w", offset, err)
	}
	return append(idx, mem...), nil
}

// keepBatches keeps the whole batches of data (checked by the read that
// returned them, and the caller's to change: a fresh read) that start
// below bound, dropping control batches and, with readCommitted, the
// transactional batches of the aborted transactions in aborted. It
// compacts data in place, copying only when it drops a batch before a
// kept one; unfiltered, it drops nothing (only the bound applies). next is the offset after the last batch it looked at (kept or
// dropped), from when there was none. Replicas append whole batches, so
// the HW and the LSO always fall on a batch boundary.
func keepBatches(data []byte, from, bound int64, aborted []producerstate.AbortedTxn, readCommitted, unfiltered bool) (_ []byte, next int64) {
	next = from
	w, r := 0, 0 // kept bytes, bytes looked at
	for len(data)-r >= record.HeaderSize {
		n := record.Size(data[r:])
		if n < record.HeaderSize || n > int64(len(data)-r) {
			break // the read checked these bytes, so this cannot happen
		}
		h, err := record.ParseBatchHeader(data[r : r+int(n)])
		if err != nil || h.BaseOffset >= bound {
			break
		}
		next = h.LastOffset() + 1
		drop := !unfiltered && (h.Attributes.Control() || (readCommitted && h.Attributes.Transactional() && isAborted(aborted, h.ProducerID, h.BaseOffset)))
		if !drop {
			if w != r {
				copy(data[w:], data[r:r+int(n)])
			}
			w += int(n)
		}
		r += int(n)
	}
	return data[:w], next
}

// isAborted reports whether the batch of producer pid at offset off
// belongs to one of the aborted transactions.
func isAborted(aborted []producerstate.AbortedTxn, pid, off int64) bool {
	for _, a := range aborted {
		if a.ProducerID == pid && a.FirstOffset <= off && off <= a.LastOffset {
			return true
		}
	}
	return false
}

// abortedKnownName is the file in a replica's directory holding the
// offset from which its producer state knows every aborted transaction
// (decimal), written when it starts over without history: a log Reset (a
// new replica, or a follower behind the leader's retention) or a rebuild
// without a snapshot above a log start. Without the file, from 0. Below
// it, data the object store still holds may belong to aborted
// transactions this replica cannot see, so it does not serve
// read_committed reads there (FetchRecords).
const abortedKnownName = "aborted-known-from"

// readAbortedKnown reads the replica directory's abortedKnownName (0
// without one).
func readAbortedKnown(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, abortedKnownName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	off, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || off < 0 {
		return 0, fmt.Errorf("%s: not an offset: %q", abortedKnownName, b)
	}
	return off, nil
}

// setAbortedKnownLocked records that the producer state knows the aborted
// transactions only from off on (when that is later than it knew), in
// memory and durably: a temporary file, synced, renamed. A failure to
// write it is returned; the in-memory bound holds meanwhile.
func (p *Replica) setAbortedKnownLocked(off int64) error {
	if off <= p.abortedKnown {
		return nil
	}
	p.abortedKnown = off
	if err := log.WriteFileAtomic(filepath.Join(p.dir, abortedKnownName), fmt.Appendf(nil, "%d\n", off)); err != nil {
		return fmt.Errorf("write %s: %w", abortedKnownName, err)
	}
	return nil
}

// errAbortedUnknown refuses a read_committed read below what the replica
// knows of aborted transactions.
func errAbortedUnknown(offset, known int64) error {
	return derr.New(derr.StorageUnavailable, "read_committed at offset %d: this replica knows the partition's aborted transactions only from offset %d (it started its log over there); "+
		"the records below are served read_uncommitted only, or read_committed once another replica leads", offset, known)
}

// ProducerInfo is one producer's state at a partition, as Kafka's
// DescribeProducers answers it.
type ProducerInfo struct {
	ProducerID int64
	Epoch      int16
	// LastSequence is the last sequence of its newest batch, -1 when the
	// epoch has none yet (a marker opened it).
	LastSequence int32
	// LastTimestamp is the MaxTimestamp of its newest batch or marker.
	LastTimestamp int64
	// CoordinatorEpoch is that of its last marker, -1 before one.
	CoordinatorEpoch int32
	// TxnFirstOffset is the first offset of its ongoing transaction, -1
	// without one.
	TxnFirstOffset int64
}

// Producers returns the producers the leader's state knows, by producer
// id; NotLeader when this replica does not lead.
func (p *Replica) Producers() ([]ProducerInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != RoleLeader || p.lead == nil {
		return nil, p.notLeader(p.meta)
	}
	var out []ProducerInfo
	for _, pid := range p.pstate.ProducerIDs() {
		e, _ := p.pstate.Producer(pid)
		info := ProducerInfo{ProducerID: pid, Epoch: e.Epoch, LastSequence: -1, LastTimestamp: e.LastTimestamp(),
			CoordinatorEpoch: e.CoordinatorEpoch, TxnFirstOffset: e.TxnFirstOffset}
		if n := len(e.Batches); n > 0 {
			info.LastSequence = e.Batches[n-1].LastSequence
		}
		out = append(out, info)
	}
	return out, nil
}
