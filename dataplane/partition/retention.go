package partition

import (
	"time"

	"github.com/sluicemq/sluice/dataplane/producerstate"
)

// retentionTime is the topic's retention.ms as a duration; zero (keep
// forever) for -1.
func retentionTime(c TopicConfig) time.Duration {
	if c.RetentionMs <= 0 {
		return 0
	}
	return time.Duration(c.RetentionMs) * time.Millisecond
}

// localRetention is what a replica's local log keeps: the topic's
// retention, or with tiered storage its local retention (never more than
// the total).
func localRetention(c TopicConfig, tiered bool) (time.Duration, int64) {
	t, n := retentionTime(c), max(c.RetentionBytes, 0)
	if !tiered {
		return t, n
	}
	if lt := c.LocalRetentionMs; lt > 0 && (t == 0 || time.Duration(lt)*time.Millisecond < t) {
		t = time.Duration(lt) * time.Millisecond
	}
	if lb := c.LocalRetentionBytes; lb > 0 && (n == 0 || lb < n) {
		n = lb
	}
	return t, n
}

// segmentAge is when the active segment rolls: Host.SegmentAge
// (--segment-age), or a tenth of the local retention if shorter (at least
// a second), so records are deleted (or tiered) at most about 10% after
// their local retention passed rather than up to a whole segment age
// later.
func (h *Host) segmentAge(c TopicConfig, tiered bool) time.Duration {
	age := h.SegmentAge
	if r, _ := localRetention(c, tiered); r > 0 {
		age = min(age, max(r/10, time.Second))
	}
	return age
}

// ApplyRetention deletes the replica's segments past its topic's
// retention, never above its last stable offset (so never above its high
// watermark, and never a segment holding a batch of an open transaction
// or one after it), and the producer-state snapshots below the new log
// start, and returns how many segments went. It also drops the aborted
// transactions whose marker lies below the new log start from the
// producer state: with tiered storage the copied segments carry them in
// their aborted-transaction indexes (tierSource.TxnIndex).
// Leaders and followers apply it each on their own, as in Kafka. It runs
// under the replica lock (lock order: replica, then the log's writer
// lock), so appends wait for the deletion of files, which is rare and
// short. After an error, Log().Failed says whether the log failed.
func (p *Replica) ApplyRetention() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lt, lb := localRetention(p.cfg, p.tiered)
	p.log.SetRetention(lt, lb, p.h.segmentAge(p.cfg, p.tiered))
	p.retainBelow.Store(p.lsoLocked())
	n, err := p.log.ApplyRetention()
	if err != nil || n == 0 {
		return n, err
	}
	// Below the log start, the object store's segments carry their own
	// aborted-transaction indexes (tiered), or nothing is left.
	p.pstate.DropAbortedBelow(p.log.LogStartOffset())
	return n, producerstate.DeleteBelow(p.dir, p.log.LogStartOffset())
}
