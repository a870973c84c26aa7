package broker

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/dataplane/producerstate"
)

// retentionTime is the topic's retention.ms as a duration; zero (keep
// forever) for -1.
func retentionTime(c topicConfig) time.Duration {
	if c.retentionMs <= 0 {
		return 0
	}
	return time.Duration(c.retentionMs) * time.Millisecond
}

// localRetention is what a replica's local log keeps: the topic's
// retention, or with tiered storage its local retention (never more than
// the total).
func localRetention(c topicConfig, tiered bool) (time.Duration, int64) {
	t, n := retentionTime(c), max(c.retentionBytes, 0)
	if !tiered {
		return t, n
	}
	if lt := c.localRetentionMs; lt > 0 && (t == 0 || time.Duration(lt)*time.Millisecond < t) {
		t = time.Duration(lt) * time.Millisecond
	}
	if lb := c.localRetentionBytes; lb > 0 && (n == 0 || lb < n) {
		n = lb
	}
	return t, n
}

// segmentAge is when the active segment rolls: --segment-age, or a tenth
// of the local retention if shorter (at least a second), so records are
// deleted (or tiered) at most about 10% after their local retention passed
// rather than up to a whole segment age later.
func (b *Broker) segmentAge(c topicConfig, tiered bool) time.Duration {
	age := b.cfg.SegmentAge
	if r, _ := localRetention(c, tiered); r > 0 {
		age = min(age, max(r/10, time.Second))
	}
	return age
}

// applyRetention deletes the partition's segments past its topic's
// retention, never above its high watermark, and the producer-state
// snapshots below the new log start. Leaders and followers apply it each
// on their own, as in Kafka. It runs under the partition lock (lock order:
// partition, then the log's writer lock), so appends wait for the
// deletion of files, which is rare and short.
func (p *partition) applyRetention() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lt, lb := localRetention(p.cfg, p.tiered)
	p.log.SetRetention(lt, lb, p.b.segmentAge(p.cfg, p.tiered))
	p.retainBelow.Store(p.hwLocked())
	n, err := p.log.ApplyRetention()
	if err != nil || n == 0 {
		return n, err
	}
	return n, producerstate.DeleteBelow(p.dir, p.log.LogStartOffset())
}

// retentionLoop applies retention to every partition every interval.
func (b *Broker) retentionLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		for _, p := range b.partitions() {
			n, err := p.applyRetention()
			switch {
			case err != nil && ctx.Err() == nil:
				b.logger.Warn("apply retention", "topic", p.topicID, "partition", p.id, "err", err)
				if ferr := p.log.Failed(); ferr != nil {
					b.failStop(p, ferr)
					return
				}
			case n > 0:
				b.logger.Info("retention deleted segments", "topic", p.topicID, "partition", p.id, "segments", n, "log_start_offset", p.log.LogStartOffset())
			}
		}
	})
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
