package tiered

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tiered/objstore"
)

// chunkSize is the unit remote segments are fetched and cached in.
const chunkSize = 1 << 20

// chunkCache caches chunks of remote .log objects on disk (bounded, least
// recently used out first) and decoded indexes in memory, fetches them
// with bounded concurrency and bytes per second, and prefetches the chunk
// after the one a read ends in (cold reads are mostly sequential).
type chunkCache struct {
	dir     string
	limit   int64
	store   objstore.Store
	sem     chan struct{}
	bucket  *tokenBucket
	metrics *Metrics

	mu      sync.Mutex
	lru     *list.List // of *chunkEntry, most recent first
	entries map[chunkKey]*list.Element
	size    int64
	loading map[chunkKey]*chunkLoad
	indexes map[string][]indexEntry // by segment id
	// txnIndexes are the segments' .txnindex objects, by segment id (nil:
	// the segment has none).
	txnIndexes map[string][]byte
	closed     bool
	wg         sync.WaitGroup
	stop       context.CancelFunc
	life       context.Context
}

type chunkKey struct {
	segment string
	n       int64
}

type chunkEntry struct {
	key  chunkKey
	size int64
}

type chunkLoad struct {
	done chan struct{}
	data []byte
	err  error
}

func newChunkCache(dir string, limit int64, store objstore.Store, concurrency int, bytesPerSec int64, m *Metrics) (*chunkCache, error) {
	if dir == "" {
		return nil, errors.New("tiered: CacheDir is required")
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("tiered: empty cache: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tiered: cache: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &chunkCache{
		dir: dir, limit: limit, store: store, sem: make(chan struct{}, concurrency),
		bucket: newTokenBucket(bytesPerSec), metrics: m,
		lru: list.New(), entries: map[chunkKey]*list.Element{}, loading: map[chunkKey]*chunkLoad{},
		indexes: map[string][]indexEntry{}, txnIndexes: map[string][]byte{}, life: ctx, stop: cancel,
	}, nil
}

func (c *chunkCache) path(k chunkKey) string {
	return filepath.Join(c.dir, fmt.Sprintf("%s-%08d", k.segment, k.n))
}

// index returns the decoded index of a segment.
func (c *chunkCache) index(ctx context.Context, seg *sluicev1.RemoteSegment) ([]indexEntry, error) {
	c.mu.Lock()
	idx, ok := c.indexes[seg.GetSegmentId()]
	c.mu.Unlock()
	if ok {
		return idx, nil
	}
	b, err := c.fetch(ctx, seg.GetObjectKey()+".index", 0, -1)
	if err != nil {
		return nil, err
	}
	idx, err = decodeIndex(b, seg.GetSizeBytes(), seg.GetBaseOffset())
	if err != nil {
		return nil, fmt.Errorf("%s.index: %w", seg.GetObjectKey(), err)
	}
	c.mu.Lock()
	if len(c.indexes) > 4096 { // indexes are small; keep a bounded number
		clear(c.indexes)
	}
	c.indexes[seg.GetSegmentId()] = idx
	c.mu.Unlock()
	return idx, nil
}

// txnIndex returns a segment's .txnindex object, false when it has none.
func (c *chunkCache) txnIndex(ctx context.Context, seg *sluicev1.RemoteSegment) ([]byte, bool, error) {
	c.mu.Lock()
	b, ok := c.txnIndexes[seg.GetSegmentId()]
	c.mu.Unlock()
	if ok {
		return b, b != nil, nil
	}
	b, err := c.fetch(ctx, seg.GetObjectKey()+".txnindex", 0, -1)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		b = nil
	case err != nil:
		return nil, false, err
	case b == nil:
		b = []byte{} // present but empty
	}
	c.mu.Lock()
	if len(c.txnIndexes) > 4096 { // small; keep a bounded number
		clear(c.txnIndexes)
	}
	c.txnIndexes[seg.GetSegmentId()] = b
	c.mu.Unlock()
	return b, b != nil, nil
}

// fetch GETs a range of an object within the cold-read limits.
func (c *chunkCache) fetch(ctx context.Context, key string, off, n int64) ([]byte, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.sem }()
	if n > 0 {
		waited, err := c.bucket.take(ctx, n)
		c.metrics.throttled.Add(waited.Seconds())
		if err != nil {
			return nil, err
		}
	}
	r, err := c.store.Get(ctx, key, off, n)
	if err != nil {
		return nil, corruptIfChecksum(err)
	}
	defer r.Close()
	var b []byte
	if n >= 0 {
		b = make([]byte, n)
		_, err = io.ReadFull(r, b)
	} else {
		b, err = io.ReadAll(r)
	}
	if err != nil {
		return nil, corruptIfChecksum(err)
	}
	c.metrics.remoteReadBytes.Add(float64(len(b)))
	return b, nil
}

// corruptIfChecksum marks an object store's checksum failure as
// corruption.
func corruptIfChecksum(err error) error {
	if errors.Is(err, objstore.ErrChecksum) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// appendChunk appends chunk n of a segment's .log to dst, reading it from
// the cache straight into dst, or from the store.
func (c *chunkCache) appendChunk(ctx context.Context, seg *sluicev1.RemoteSegment, n int64, dst []byte) ([]byte, error) {
	k := chunkKey{seg.GetSegmentId(), n}
	size := min(chunkSize, seg.GetSizeBytes()-n*chunkSize)
	c.mu.Lock()
	e, cached := c.entries[k]
	if cached {
		c.lru.MoveToFront(e)
	}
	c.mu.Unlock()
	if cached {
		if out, err := readInto(c.path(k), dst, size); err == nil {
			c.metrics.cacheHits.Inc()
			return out, nil
		}
		// Evicted meanwhile (or damaged): fetch it again.
	}
	b, err := c.chunk(ctx, seg, n)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// readInto appends the size bytes of the file at path to dst.
func readInto(path string, dst []byte, size int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return dst, err
	}
	defer f.Close()
	dst = slices.Grow(dst, int(size))
	if _, err := io.ReadFull(f, dst[len(dst):len(dst)+int(size)]); err != nil {
		return dst, err
	}
	return dst[:len(dst)+int(size)], nil
}

// chunk returns chunk n of a segment's .log, from the cache or the store.
func (c *chunkCache) chunk(ctx context.Context, seg *sluicev1.RemoteSegment, n int64) ([]byte, error) {
	k := chunkKey{seg.GetSegmentId(), n}
	c.mu.Lock()
	if e, ok := c.entries[k]; ok {
		c.lru.MoveToFront(e)
		c.mu.Unlock()
		b, err := os.ReadFile(c.path(k))
		if err == nil {
			c.metrics.cacheHits.Inc()
			return b, nil
		}
		c.mu.Lock()
		if cur, ok := c.entries[k]; ok && cur == e {
			c.drop(e)
		}
	}
	if l, ok := c.loading[k]; ok {
		c.mu.Unlock()
		select {
		case <-l.done:
			return l.data, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l := &chunkLoad{done: make(chan struct{})}
	c.loading[k] = l
	c.mu.Unlock()
	c.metrics.cacheMisses.Inc()

	off := n * chunkSize
	size := min(chunkSize, seg.GetSizeBytes()-off)
	l.data, l.err = c.fetch(ctx, seg.GetObjectKey()+".log", off, size)
	if l.err == nil {
		if err := writeCacheFile(c.path(k), l.data); err == nil {
			c.mu.Lock()
			if !c.closed {
				c.entries[k] = c.lru.PushFront(&chunkEntry{key: k, size: size})
				c.size += size
				for c.size > c.limit && c.lru.Len() > 1 {
					c.drop(c.lru.Back())
				}
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	delete(c.loading, k)
	c.mu.Unlock()
	close(l.done)
	return l.data, l.err
}

// writeCacheFile writes a cache file whole (temp file + rename) but
// without fsync: the cache is emptied at every start.
func writeCacheFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// drop removes a cached chunk; c.mu is held.
func (c *chunkCache) drop(e *list.Element) {
	ce := e.Value.(*chunkEntry)
	c.lru.Remove(e)
	delete(c.entries, ce.key)
	c.size -= ce.size
	_ = os.Remove(c.path(ce.key))
}

// forget drops a deleted segment's chunks and index.
func (c *chunkCache) forget(segment string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.indexes, segment)
	delete(c.txnIndexes, segment)
	for k, e := range c.entries {
		if k.segment == segment {
			c.drop(e)
		}
	}
}

// read returns whole, checked batches of seg from the one holding offset.
func (c *chunkCache) read(ctx context.Context, seg *sluicev1.RemoteSegment, offset int64, maxBytes int) ([]byte, error) {
	idx, err := c.index(ctx, seg)
	if err != nil {
		return nil, err
	}
	pos := lookup(idx, offset)
	size := seg.GetSizeBytes()
	bufAt := pos - pos%chunkSize
	// Enough for the batches wanted, the index's slack before them and a
	// chunk of alignment, so that appending chunks rarely reallocates.
	buf := make([]byte, 0, min(size-bufAt, int64(maxBytes)+indexInterval+2*chunkSize))
	from, to := int64(-1), int64(0) // the batches to return: buf[from:to]
	var last int64                  // last chunk read
	for {
		rel := pos - bufAt
		if rel+12 > int64(len(buf)) || rel+12+batchLen(buf[rel:]) > int64(len(buf)) {
			if bufAt+int64(len(buf)) >= size {
				if pos >= size {
					break
				}
				return nil, fmt.Errorf("%s.log: batch at %d runs past the end: %w", seg.GetObjectKey(), pos, ErrCorrupt)
			}
			last = (bufAt + int64(len(buf))) / chunkSize
			if buf, err = c.appendChunk(ctx, seg, last, buf); err != nil {
				return nil, err
			}
			continue
		}
		batch, _, err := record.ReadBatch(buf[rel:])
		if err != nil {
			return nil, fmt.Errorf("%s.log at %d: %w: %w", seg.GetObjectKey(), pos, ErrCorrupt, err)
		}
		if batch.LastOffset() >= offset {
			if from >= 0 && to-from+int64(len(batch)) > int64(maxBytes) {
				break
			}
			if from < 0 {
				from = rel
			}
			to = rel + int64(len(batch))
		}
		pos += int64(len(batch))
		if pos >= size || (from >= 0 && to-from >= int64(maxBytes)) {
			break
		}
	}
	if from < 0 {
		return nil, fmt.Errorf("%s.log holds no batch at offset %d: %w", seg.GetObjectKey(), offset, ErrCorrupt)
	}
	if next := last + 1; next*chunkSize < size {
		c.prefetch(seg, next)
	}
	return buf[from:to:to], nil
}

// batchLen is the size of the batch at the start of b (b has at least 12
// bytes).
func batchLen(b []byte) int64 {
	return int64(uint32(b[8])<<24 | uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11]))
}

// prefetch loads a chunk in the background when no GET slot is busy.
func (c *chunkCache) prefetch(seg *sluicev1.RemoteSegment, n int64) {
	c.mu.Lock()
	_, cached := c.entries[chunkKey{seg.GetSegmentId(), n}]
	_, loading := c.loading[chunkKey{seg.GetSegmentId(), n}]
	busy := len(c.sem) > 0 || c.closed
	if !cached && !loading && !busy {
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if cached || loading || busy {
		return
	}
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.life, time.Minute)
		defer cancel()
		if _, err := c.chunk(ctx, seg, n); err == nil {
			c.metrics.prefetched.Inc()
		}
	}()
}

func (c *chunkCache) close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	return nil
}

// tokenBucket limits bytes per second; a take larger than the burst waits
// for its share.
type tokenBucket struct {
	rate float64 // bytes per second; 0: unlimited
	mu   sync.Mutex
	have float64
	at   time.Time
}

func newTokenBucket(rate int64) *tokenBucket {
	return &tokenBucket{rate: float64(rate), have: float64(rate), at: time.Now()}
}

// take waits until n bytes may go and returns how long it waited.
func (b *tokenBucket) take(ctx context.Context, n int64) (time.Duration, error) {
	if b.rate <= 0 {
		return 0, nil
	}
	b.mu.Lock()
	now := time.Now()
	b.have = min(b.rate, b.have+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
	b.have -= float64(n) // may go negative: later takes wait for it
	wait := time.Duration(0)
	if b.have < 0 {
		wait = time.Duration(-b.have / b.rate * float64(time.Second))
	}
	b.mu.Unlock()
	if wait == 0 {
		return 0, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return wait, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
