// Package tiered moves a broker's cold log segments to object storage and
// reads them back (DESIGN.md §6, modelled on Kafka's KIP-405).
//
// A partition's leader copies each closed segment that lies wholly below
// the high watermark ([Tier.Copy]); the control plane records every copy
// (COPY_STARTED → COPY_FINISHED → DELETE_STARTED → DELETED) and fences it
// by broker epoch and leader epoch, so copies are consecutive offset
// ranges with no gap and no overlap, and a new leader continues where the
// old one stopped. Local retention may delete a segment only once it is
// copied ([Tier.CopiedThrough]). A fetch below the local log start reads
// the remote segment through its index and a bounded on-disk chunk cache
// ([Tier.Read]); cold reads are limited in concurrency and bytes per
// second so that they cannot starve the hot path. Total retention deletes
// remote segments ([Tier.ApplyRetention]).
package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tiered/objstore"
)

// MetadataClient is the part of the control plane's BrokerService that
// holds remote segment metadata.
type MetadataClient interface {
	AddRemoteSegment(context.Context, *connect.Request[sluicev1.AddRemoteSegmentRequest]) (*connect.Response[sluicev1.AddRemoteSegmentResponse], error)
	UpdateRemoteSegment(context.Context, *connect.Request[sluicev1.UpdateRemoteSegmentRequest]) (*connect.Response[sluicev1.UpdateRemoteSegmentResponse], error)
	ListRemoteSegments(context.Context, *connect.Request[sluicev1.ListRemoteSegmentsRequest]) (*connect.Response[sluicev1.ListRemoteSegmentsResponse], error)
}

// Config configures a broker's Tier.
type Config struct {
	Store    objstore.Store
	Meta     MetadataClient
	BrokerID int32
	// BrokerEpoch returns the broker's current registration epoch.
	BrokerEpoch func() int64
	// CacheDir holds cached chunks of remote segments; emptied at start.
	CacheDir string
	// CacheBytes bounds the chunk cache on disk.
	CacheBytes int64
	// MaxConcurrentReads bounds object-store GETs in flight for cold reads.
	MaxConcurrentReads int
	// ReadBytesPerSecond bounds the bytes cold reads fetch from the object
	// store per second; 0 means no limit.
	ReadBytesPerSecond int64
	Metrics            *Metrics
	Logger             *slog.Logger
	Now                func() time.Time
}

// Partition names one partition and the leadership a copy is made under.
type Partition struct {
	TenantID    string
	TopicID     string
	Partition   int32
	LeaderEpoch int32
}

type partKey struct {
	topicID   string
	partition int32
}

func (p Partition) key() partKey { return partKey{p.TopicID, p.Partition} }

// Tier is one broker's tiered storage. It is safe for concurrent use.
type Tier struct {
	cfg   Config
	cache *chunkCache

	mu    sync.Mutex
	parts map[partKey]*partState
}

// partState is what the broker knows of a partition's remote segments.
type partState struct {
	mu sync.Mutex // serialises copies and retention of the partition
	// Guarded by Tier.mu:
	loaded   bool
	loadedAt time.Time
	sweptAt  time.Time                 // last clean-up of unfinished copies and orphans
	finished []*sluicev1.RemoteSegment // COPY_FINISHED, by base offset
	next     int64                     // next offset to copy; -1 when nothing was ever copied
	blocked  string                    // why copying stopped, for logs
	failures int                       // copy attempts failed in a row
	retryAt  time.Time                 // no attempt before then (backoff after failures)
}

// New makes a Tier and empties its cache directory.
func New(cfg Config) (*Tier, error) {
	if cfg.Store == nil || cfg.Meta == nil || cfg.BrokerEpoch == nil {
		return nil, errors.New("tiered: Store, Meta and BrokerEpoch are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.MaxConcurrentReads <= 0 {
		cfg.MaxConcurrentReads = 4
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 1 << 30
	}
	cache, err := newChunkCache(cfg.CacheDir, cfg.CacheBytes, cfg.Store, cfg.MaxConcurrentReads, cfg.ReadBytesPerSecond, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return &Tier{cfg: cfg, cache: cache, parts: map[partKey]*partState{}}, nil
}

func (t *Tier) state(p Partition) *partState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.parts[p.key()]
	if st == nil {
		st = &partState{next: -1}
		t.parts[p.key()] = st
	}
	return st
}

// Forget drops what the broker knows of a partition (it stopped leading it,
// or the topic is gone); the next use reloads it from the control plane.
func (t *Tier) Forget(topicID string, partition int32) {
	t.mu.Lock()
	delete(t.parts, partKey{topicID, partition})
	t.mu.Unlock()
	t.cfg.Metrics.setPending(Partition{TopicID: topicID, Partition: partition}, 0, 0)
}

// load reads a partition's remote segments from the control plane.
func (t *Tier) load(ctx context.Context, p Partition, st *partState) ([]*sluicev1.RemoteSegment, error) {
	res, err := t.cfg.Meta.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: p.TopicID, Partition: p.Partition}))
	if err != nil {
		return nil, fmt.Errorf("list remote segments: %w", err)
	}
	all := res.Msg.GetSegments()
	var finished []*sluicev1.RemoteSegment
	// Where the next copy begins: after the highest segment ever finished
	// (a copy abandoned before it finished does not count).
	next := res.Msg.GetNextBaseOffset()
	for _, s := range all {
		if s.GetState() == sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED {
			finished = append(finished, s)
		}
	}
	slices.SortFunc(finished, func(a, b *sluicev1.RemoteSegment) int { return int(a.GetBaseOffset() - b.GetBaseOffset()) })
	t.mu.Lock()
	st.loaded, st.loadedAt, st.finished, st.next = true, t.cfg.Now(), finished, next
	t.mu.Unlock()
	return all, nil
}

// Segments returns the partition's copied segments by base offset, loading
// them when unknown or, with refresh, when last loaded more than a second
// ago.
func (t *Tier) Segments(ctx context.Context, p Partition, refresh bool) ([]*sluicev1.RemoteSegment, error) {
	st := t.state(p)
	t.mu.Lock()
	fresh := st.loaded && (!refresh || t.cfg.Now().Sub(st.loadedAt) < time.Second)
	segs := st.finished
	t.mu.Unlock()
	if fresh {
		return segs, nil
	}
	if _, err := t.load(ctx, p, st); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return st.finished, nil
}

// CopiedThrough returns the last offset copied to the object store (-1
// when none, or not known yet): local retention may delete a segment only
// up to it.
func (t *Tier) CopiedThrough(topicID string, partition int32) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.parts[partKey{topicID, partition}]
	if st == nil || !st.loaded {
		return -1
	}
	return st.next - 1
}

// StartOffset returns the first offset held in the object store and
// whether there is one.
func (t *Tier) StartOffset(ctx context.Context, p Partition) (int64, bool, error) {
	segs, err := t.Segments(ctx, p, false)
	if err != nil || len(segs) == 0 {
		return 0, false, err
	}
	return segs[0].GetBaseOffset(), true, nil
}

// Source is the local log of a partition replica that a Tier copies from.
// Brokers adapt their segment log to it; tiered needs nothing else of it.
type Source interface {
	// ClosedSegments lists the closed segments (rolled, synced, never
	// written again), oldest first.
	ClosedSegments() []Segment
	// OpenSegment opens the batches file of the closed segment with base
	// offset base. It stays readable if retention deletes the segment
	// meanwhile; the caller closes it.
	OpenSegment(base int64) (SegmentReader, error)
}

// TxnIndexSource is a Source whose segments have an aborted-transaction
// index: TxnIndex returns it for the offsets [base, end] being copied
// (bytes opaque to tiered), and Copy uploads it as <key>.txnindex with the
// segment, before the copy is finished; TxnIndex reads it back.
type TxnIndexSource interface {
	Source
	TxnIndex(base, end int64) ([]byte, error)
}

// Segment describes a closed local segment.
type Segment struct {
	BaseOffset   int64 // first offset
	NextOffset   int64 // offset after the last batch
	Size         int64 // bytes of batches
	MaxTimestamp int64 // largest record timestamp
}

// SegmentReader reads a closed segment's batches file.
type SegmentReader interface {
	io.ReaderAt
	io.Closer
}

func (t *Tier) fence() (int32, int64) { return t.cfg.BrokerID, t.cfg.BrokerEpoch() }

// Copy copies the partition's closed segments that lie wholly below hw
// and after the last copied offset, in order, and returns how many it
// copied. The caller leads the partition at p.LeaderEpoch. On the first
// call for a partition it also cleans up copies that never finished (a
// leader that died mid-copy).
//
// After a failure it backs off (1 s doubling up to a minute): calls before
// the next attempt is due return (0, nil) at once.
func (t *Tier) Copy(ctx context.Context, p Partition, l Source, hw int64) (int, error) {
	st := t.state(p)
	st.mu.Lock()
	defer st.mu.Unlock()
	defer t.updatePending(p, st, l)
	t.mu.Lock()
	now := t.cfg.Now()
	waiting := now.Before(st.retryAt)
	sweep := !st.loaded || now.Sub(st.sweptAt) > SweepInterval
	t.mu.Unlock()
	if waiting {
		return 0, nil
	}
	if sweep {
		if err := t.sweep(ctx, p, st); err != nil {
			t.failed(st)
			return 0, err
		}
	}
	copied := 0
	for _, si := range l.ClosedSegments() {
		t.mu.Lock()
		next := st.next
		t.mu.Unlock()
		if si.NextOffset-1 < next {
			continue // copied already
		}
		if si.NextOffset > hw {
			break // not committed yet: it may still be truncated
		}
		from := si.BaseOffset
		if next >= 0 {
			if next < si.BaseOffset {
				t.blocked(p, st, fmt.Sprintf("offsets [%d, %d) are neither copied nor on this broker's disk", next, si.BaseOffset))
				break
			}
			from = next
		}
		if err := ctx.Err(); err != nil {
			return copied, err
		}
		start := t.cfg.Now()
		n, err := t.copySegment(ctx, p, st, l, si, from)
		if err != nil {
			t.failed(st)
			return copied, err
		}
		t.cfg.Metrics.uploaded(n, t.cfg.Now().Sub(start))
		copied++
	}
	t.mu.Lock()
	st.failures, st.retryAt = 0, time.Time{}
	t.mu.Unlock()
	return copied, nil
}

// failed counts a failed attempt and schedules the next one. It also asks
// for a sweep first: that cleans up the failed copy if its own clean-up
// failed too (the object store may be down), rather than leave one
// unfinished copy per attempt.
func (t *Tier) failed(st *partState) {
	t.cfg.Metrics.uploadErrors.Inc()
	t.mu.Lock()
	defer t.mu.Unlock()
	st.failures++
	st.retryAt = t.cfg.Now().Add(min(time.Second<<min(st.failures-1, 6), time.Minute))
	st.sweptAt = time.Time{}
}

// updatePending reports the bytes of the partition's closed segments not
// copied yet.
func (t *Tier) updatePending(p Partition, st *partState, l Source) {
	t.mu.Lock()
	next := st.next
	t.mu.Unlock()
	var bytes, segments int64
	for _, si := range l.ClosedSegments() {
		if si.NextOffset-1 >= next {
			bytes += si.Size
			segments++
		}
	}
	t.cfg.Metrics.setPending(p, bytes, segments)
}

// SweepInterval is how often a leader cleans up a partition's unfinished
// copies and orphaned objects (and always when it starts leading).
var SweepInterval = 10 * time.Minute

// orphanAge: an object no metadata accounts for is deleted once it is this
// old, so a copy still being written by a deposed leader is not raced.
const orphanAge = 10 * time.Minute

// sweep reloads a partition's remote segments and cleans up: copies that
// never finished (COPY_STARTED: this broker leads, holds the partition's
// copy lock, and has none in flight; a deposed leader's cannot finish),
// deletions that did not finish, and objects under the partition's prefix
// that no finished copy accounts for (a deposed leader's late Put), once
// older than orphanAge.
func (t *Tier) sweep(ctx context.Context, p Partition, st *partState) error {
	all, err := t.load(ctx, p, st)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, s := range all {
		switch s.GetState() {
		case sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED:
			live[s.GetObjectKey()] = true
		case sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_STARTED, sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETE_STARTED:
			if err := t.deleteSegment(ctx, p, s); err != nil {
				t.cfg.Logger.Warn("tiered: clean up unfinished copy", "topic", p.TopicID, "partition", p.Partition, "segment", s.GetSegmentId(), "err", err)
				live[s.GetObjectKey()] = true // try again next sweep
			}
		}
	}
	prefix := fmt.Sprintf("tenants/%s/topics/%s/%d/", p.TenantID, p.TopicID, p.Partition)
	now := t.cfg.Now()
	for info, err := range t.cfg.Store.List(ctx, prefix) {
		if err != nil {
			return fmt.Errorf("tiered: list %s: %w", prefix, err)
		}
		key := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(info.Key, ".log"), ".txnindex"), ".index")
		if live[key] || now.Sub(info.ModTime) < orphanAge {
			continue
		}
		if err := t.cfg.Store.Delete(ctx, info.Key); err != nil {
			return fmt.Errorf("tiered: delete orphan %s: %w", info.Key, err)
		}
		t.cfg.Metrics.orphans.Inc()
		t.cfg.Logger.Info("tiered: deleted orphaned object", "key", info.Key)
	}
	t.mu.Lock()
	st.sweptAt = now
	t.mu.Unlock()
	return nil
}

// DeletePartition deletes every object of a partition (its topic was
// deleted) and returns how many it deleted.
func (t *Tier) DeletePartition(ctx context.Context, tenantID, topicID string, partition int32) (int, error) {
	t.Forget(topicID, partition)
	prefix := fmt.Sprintf("tenants/%s/topics/%s/%d/", tenantID, topicID, partition)
	n := 0
	for info, err := range t.cfg.Store.List(ctx, prefix) {
		if err != nil {
			return n, err
		}
		if err := t.cfg.Store.Delete(ctx, info.Key); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (t *Tier) blocked(p Partition, st *partState, why string) {
	t.mu.Lock()
	changed := st.blocked != why
	st.blocked = why
	t.mu.Unlock()
	if changed {
		t.cfg.Logger.Error("tiered: cannot copy partition", "topic", p.TopicID, "partition", p.Partition, "reason", why)
	}
}

// copySegment copies the part of a closed local segment from offset from.
func (t *Tier) copySegment(ctx context.Context, p Partition, st *partState, l Source, si Segment, from int64) (int64, error) {
	file, err := l.OpenSegment(si.BaseOffset)
	if err != nil {
		return 0, err
	}
	defer file.Close()
	sc, err := scanSegment(file, si.Size, from)
	if err != nil {
		return 0, fmt.Errorf("tiered: segment %d of %s/%d: %w", si.BaseOffset, p.TopicID, p.Partition, err)
	}
	seg := &sluicev1.RemoteSegment{
		TenantId: p.TenantID, TopicId: p.TopicID, Partition: p.Partition,
		BaseOffset: sc.base, EndOffset: sc.end, LeaderEpoch: p.LeaderEpoch,
		SizeBytes: sc.size, MaxTimestampMs: sc.maxTs,
	}
	for _, e := range sc.epochs {
		seg.Epochs = append(seg.Epochs, &sluicev1.EpochStart{Epoch: e.epoch, StartOffset: e.start})
	}
	broker, epoch := t.fence()
	res, err := t.cfg.Meta.AddRemoteSegment(ctx, connect.NewRequest(&sluicev1.AddRemoteSegmentRequest{
		BrokerId: broker, BrokerEpoch: epoch, LeaderEpoch: p.LeaderEpoch, Segment: seg,
	}))
	if err != nil {
		t.refuted(st, err)
		return 0, fmt.Errorf("tiered: start copy of [%d, %d]: %w", sc.base, sc.end, err)
	}
	seg = res.Msg.GetSegment()
	key := seg.GetObjectKey()
	idx := encodeIndex(sc.index, sc.size)
	err = t.cfg.Store.Put(ctx, key+".log", io.NewSectionReader(file, sc.start, sc.size), sc.size)
	if err == nil {
		err = t.cfg.Store.Put(ctx, key+".index", bytes.NewReader(idx), int64(len(idx)))
	}
	if ts, ok := l.(TxnIndexSource); ok && err == nil {
		var ti []byte
		if ti, err = ts.TxnIndex(sc.base, sc.end); err == nil {
			err = t.cfg.Store.Put(ctx, key+".txnindex", bytes.NewReader(ti), int64(len(ti)))
		}
	}
	if err == nil {
		_, err = t.cfg.Meta.UpdateRemoteSegment(ctx, connect.NewRequest(&sluicev1.UpdateRemoteSegmentRequest{
			BrokerId: broker, BrokerEpoch: epoch, LeaderEpoch: p.LeaderEpoch,
			TopicId: p.TopicID, Partition: p.Partition, SegmentId: seg.GetSegmentId(),
			State: sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED,
		}))
		t.refuted(st, err)
	}
	if err != nil {
		// Best effort: a copy that cannot finish is cleaned up now, or by
		// the next leader's first Copy.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if derr := t.deleteSegment(cctx, p, seg); derr != nil {
			t.cfg.Logger.Warn("tiered: clean up failed copy", "segment", seg.GetSegmentId(), "err", derr)
		}
		cancel()
		return 0, fmt.Errorf("tiered: copy [%d, %d] to %s: %w", sc.base, sc.end, key, err)
	}
	seg.State = sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED
	t.mu.Lock()
	st.finished = append(slices.Clone(st.finished), seg)
	st.next = sc.end + 1
	st.blocked = ""
	t.mu.Unlock()
	t.cfg.Logger.Debug("tiered: copied segment", "topic", p.TopicID, "partition", p.Partition, "base", sc.base, "end", sc.end, "bytes", sc.size)
	return sc.size, nil
}

// refuted makes the next Copy reload the partition's remote segments
// after the control plane refused a copy (another leader copied meanwhile,
// or this one lost the leadership).
func (t *Tier) refuted(st *partState, err error) {
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		return
	}
	t.mu.Lock()
	st.loaded = false
	t.mu.Unlock()
}

// deleteSegment moves a segment through DELETE_STARTED, deletes its
// objects and marks it DELETED.
func (t *Tier) deleteSegment(ctx context.Context, p Partition, s *sluicev1.RemoteSegment) error {
	broker, epoch := t.fence()
	update := func(state sluicev1.RemoteSegmentState) error {
		_, err := t.cfg.Meta.UpdateRemoteSegment(ctx, connect.NewRequest(&sluicev1.UpdateRemoteSegmentRequest{
			BrokerId: broker, BrokerEpoch: epoch, LeaderEpoch: p.LeaderEpoch,
			TopicId: p.TopicID, Partition: p.Partition, SegmentId: s.GetSegmentId(), State: state,
		}))
		return err
	}
	if s.GetState() != sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETE_STARTED {
		if err := update(sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETE_STARTED); err != nil {
			return err
		}
	}
	for _, suffix := range []string{".log", ".index", ".txnindex"} {
		if err := t.cfg.Store.Delete(ctx, s.GetObjectKey()+suffix); err != nil {
			return err
		}
	}
	t.cache.forget(s.GetSegmentId())
	return update(sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETED)
}

// ApplyRetention deletes the partition's oldest remote segments that total
// retention no longer keeps: older than retention (by their largest
// timestamp), or beyond retentionBytes counting localBytes of the local
// log that is not copied. Zero or negative limits keep everything. It
// returns how many segments it deleted. The caller leads the partition.
func (t *Tier) ApplyRetention(ctx context.Context, p Partition, retention time.Duration, retentionBytes, localBytes int64) (int, error) {
	st := t.state(p)
	st.mu.Lock()
	defer st.mu.Unlock()
	segs, err := t.Segments(ctx, p, false)
	if err != nil {
		return 0, err
	}
	total := localBytes
	for _, s := range segs {
		total += s.GetSizeBytes()
	}
	now := t.cfg.Now().UnixMilli()
	n := 0
	for _, s := range segs {
		byTime := retention > 0 && now-s.GetMaxTimestampMs() > retention.Milliseconds()
		bySize := retentionBytes > 0 && total-s.GetSizeBytes() >= retentionBytes
		if !byTime && !bySize {
			break
		}
		// Drop it from the readable set first, so no read starts on it.
		t.mu.Lock()
		st.finished = slices.DeleteFunc(slices.Clone(st.finished), func(x *sluicev1.RemoteSegment) bool { return x.GetSegmentId() == s.GetSegmentId() })
		t.mu.Unlock()
		if err := t.deleteSegment(ctx, p, s); err != nil {
			return n, err
		}
		total -= s.GetSizeBytes()
		t.cfg.Metrics.remoteDeleted.Inc()
		n++
	}
	return n, nil
}

// ErrNotRemote: the offset is in no remote segment.
var ErrNotRemote = errors.New("offset is not in the object store")

// Read returns whole batches from the remote segment holding offset: the
// batch containing offset first, then the following ones while they fit
// in maxBytes (the first is returned whole even if larger). Every batch's
// CRC is checked; a corrupt one is an error wrapping ErrCorrupt and never
// returned. ErrNotRemote when no remote segment holds offset.
func (t *Tier) Read(ctx context.Context, p Partition, offset int64, maxBytes int) ([]byte, error) {
	segs, err := t.Segments(ctx, p, false)
	if err != nil {
		return nil, err
	}
	seg := find(segs, offset)
	if seg == nil {
		if segs, err = t.Segments(ctx, p, true); err != nil {
			return nil, err
		}
		if seg = find(segs, offset); seg == nil {
			return nil, fmt.Errorf("offset %d of %s/%d: %w", offset, p.TopicID, p.Partition, ErrNotRemote)
		}
	}
	out, err := t.cache.read(ctx, seg, offset, maxBytes)
	if errors.Is(err, ErrCorrupt) {
		t.cfg.Metrics.corrupt.Inc()
		t.cfg.Logger.Error("tiered: corrupt remote segment", "topic", p.TopicID, "partition", p.Partition,
			"segment", seg.GetSegmentId(), "key", seg.GetObjectKey(), "offset", offset, "err", err)
	}
	return out, err
}

// TxnIndex returns the aborted-transaction index (TxnIndexSource's bytes)
// of the remote segment holding offset, which Read serves from; ok is
// false when the segment has none (its copy's source had none). It fails
// with ErrNotRemote as Read does.
func (t *Tier) TxnIndex(ctx context.Context, p Partition, offset int64) (_ []byte, ok bool, _ error) {
	segs, err := t.Segments(ctx, p, false)
	if err != nil {
		return nil, false, err
	}
	seg := find(segs, offset)
	if seg == nil {
		if segs, err = t.Segments(ctx, p, true); err != nil {
			return nil, false, err
		}
		if seg = find(segs, offset); seg == nil {
			return nil, false, fmt.Errorf("offset %d of %s/%d: %w", offset, p.TopicID, p.Partition, ErrNotRemote)
		}
	}
	return t.cache.txnIndex(ctx, seg)
}

func find(segs []*sluicev1.RemoteSegment, offset int64) *sluicev1.RemoteSegment {
	i, _ := slices.BinarySearchFunc(segs, offset, func(s *sluicev1.RemoteSegment, off int64) int {
		switch {
		case s.GetEndOffset() < off:
			return -1
		case s.GetBaseOffset() > off:
			return 1
		}
		return 0
	})
	if i < len(segs) && segs[i].GetBaseOffset() <= offset && offset <= segs[i].GetEndOffset() {
		return segs[i]
	}
	return nil
}

// OffsetForTimestamp returns the first offset of a remote batch whose
// largest timestamp is at least ts, and whether there is one in the object
// store.
func (t *Tier) OffsetForTimestamp(ctx context.Context, p Partition, ts int64) (int64, bool, error) {
	segs, err := t.Segments(ctx, p, false)
	if err != nil {
		return 0, false, err
	}
	for _, s := range segs {
		if s.GetMaxTimestampMs() < ts {
			continue
		}
		idx, err := t.cache.index(ctx, s)
		if err != nil {
			return 0, false, err
		}
		off := lookupTime(idx, ts)
		for off <= s.GetEndOffset() {
			b, err := t.cache.read(ctx, s, off, 1<<20)
			if err != nil {
				return 0, false, err
			}
			for len(b) > 0 {
				batch, rest, err := record.ReadBatch(b)
				if err != nil {
					return 0, false, fmt.Errorf("%w: %w", ErrCorrupt, err)
				}
				if batch.MaxTimestamp() >= ts {
					return max(batch.BaseOffset(), off), true, nil
				}
				off = batch.LastOffset() + 1
				b = rest
			}
		}
	}
	return 0, false, nil
}

// Close releases the cache.
func (t *Tier) Close() error { return t.cache.close() }
