package log

import (
	"container/list"
	"fmt"
	"os"
	"sync"
	"time"
)

// FileCache bounds the segment (.log) files that the logs sharing it hold
// open: a broker makes one for all its partition replicas (Config.Files),
// so that its file descriptors do not grow with its partitions and
// segments. A segment opens its file when a reader, a writer or an fsync
// needs it and releases it afterwards; when more than Capacity files are
// open, the least recently used ones that nobody uses are closed, and
// reopened on the next use.
//
// A file is never closed while it is in use (each use holds a reference),
// so the cache can exceed its capacity by the files in use at once. Nor is
// a file closed while it holds writes not yet fsynced: closing it could
// lose the error of a later failed writeback (PostgreSQL's "fsyncgate").
// Such a file is fsynced first, by a goroutine the cache starts while it
// has any to clean, off the path of appends and reads; a failed fsync
// fails the owning log (Log.Failed) and every later fsync of that segment
// returns the error. With FlushAlways and FlushInterval a file holds
// unsynced writes only until the log's next fsync; with FlushOS the active
// segment holds them until it is sealed, so over capacity FlushOS costs an
// fsync of each active segment the cache closes. Files waiting for that
// fsync can take the cache over its capacity, up to twice it: beyond that,
// the caller that needs a file fsyncs one itself.
//
// The cache also runs the interval flush of its FlushInterval logs: one
// goroutine per Config.FlushInterval for all of them, which fsyncs every
// interval the logs that appended since their last flush, at most 16 at
// once, so that goroutines do not grow with partitions either.
//
// A FileCache is safe for concurrent use. Its zero value is not usable:
// call NewFileCache.
type FileCache struct {
	capacity int // at most this many unused files stay open; 0: no limit

	mu       sync.Mutex
	open     int       // open files
	clean    list.List // *segFile unused, open, all writes fsynced; least recent at the back
	dirty    list.List // *segFile unused, open, with writes not yet fsynced
	cleaning bool      // a cleaner goroutine runs

	flushMu     sync.Mutex
	flushGroups map[time.Duration]*flushGroup // the FlushInterval logs' flushes, by interval
}

// NewFileCache returns a cache that keeps at most capacity segment files
// open (beyond those in use); capacity 0 means no limit.
func NewFileCache(capacity int) *FileCache {
	return &FileCache{capacity: max(capacity, 0)}
}

// Capacity is the most files the cache keeps open; 0 means no limit.
func (c *FileCache) Capacity() int { return c.capacity }

// OpenFiles is the number of segment files open now.
func (c *FileCache) OpenFiles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// segFile is one segment's .log file as the cache holds it: closed or
// open, with the references of its current users.
type segFile struct {
	c    *FileCache
	path string
	fail func(error) // fails the owning log

	// Under c.mu.
	f    *os.File      // nil while closed
	refs int           // users now (acquire without release)
	elem *list.Element // in list (c.clean or c.dirty) when refs == 0 and f != nil
	list *list.List
	// gen counts writes, syncedGen the writes the last successful fsync
	// covered; they differ while the file holds unsynced writes.
	gen, syncedGen uint64
	syncErr        error // a failed fsync, returned by every later one
	gone           bool  // removed, or its log closed: never opened again

	// syncMu runs one fsync of the file at a time, so that the one after a
	// failed fsync sees its error instead of a success that covers nothing.
	syncMu sync.Mutex
}

// newFile registers the segment file at path; f, when not nil, is the file
// already open (a segment just created).
func (c *FileCache) newFile(path string, f *os.File, fail func(error)) *segFile {
	h := &segFile{c: c, path: path, fail: fail}
	if f != nil {
		c.mu.Lock()
		h.f = f
		c.open++
		h.park(false)
		c.shrinkLocked(c.capacity)
		c.mu.Unlock()
	}
	return h
}

// acquire returns the open file, opening it if needed, and holds a
// reference on it until release: the file is not closed meanwhile.
func (h *segFile) acquire() (*os.File, error) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if h.gone {
			return nil, fmt.Errorf("segment file %s: %w", h.path, ErrClosed)
		}
		if h.f != nil {
			h.unpark()
			h.refs++
			return h.f, nil
		}
		c.shrinkLocked(c.capacity - 1)
		if c.capacity > 0 && c.open >= 2*c.capacity && c.cleanOneLocked() {
			continue // the lock was released: look again
		}
		f, err := os.OpenFile(h.path, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		h.f = f
		c.open++
		h.refs++
		return f, nil
	}
}

// park puts the unused open file in the list its state says, at the
// front (most recently used) or, with back, the back. Caller holds c.mu.
func (h *segFile) park(back bool) {
	h.list = &h.c.clean
	if h.gen != h.syncedGen {
		h.list = &h.c.dirty
	}
	if back {
		h.elem = h.list.PushBack(h)
	} else {
		h.elem = h.list.PushFront(h)
	}
}

// unpark takes the file out of its list, if it is in one. Caller holds c.mu.
func (h *segFile) unpark() {
	if h.elem != nil {
		h.list.Remove(h.elem)
		h.elem, h.list = nil, nil
	}
}

// written records a write (or truncation) through the file the caller
// acquired (and still holds), once it completed: the file now needs an
// fsync before it may be closed.
func (h *segFile) written() {
	h.c.mu.Lock()
	h.gen++
	h.c.mu.Unlock()
}

// release drops the reference acquire took.
func (h *segFile) release() {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	h.releaseLocked()
}

func (h *segFile) releaseLocked() {
	h.refs--
	if h.refs > 0 {
		return
	}
	if h.gone {
		h.closeLocked()
		return
	}
	h.park(false)
	h.c.shrinkLocked(h.c.capacity)
}

func (h *segFile) closeLocked() error {
	if h.f == nil {
		return nil
	}
	err := h.f.Close()
	h.f = nil
	h.c.open--
	return err
}

// forget closes the file for good (the segment was removed, or its log
// closed): at once when unused, else when its last user releases it.
func (h *segFile) forget() error {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	h.gone = true
	if h.refs > 0 {
		return nil
	}
	h.unpark()
	return h.closeLocked()
}

// sync makes every completed write to the file durable: it fsyncs the
// file unless an fsync already covered them all (the cache's, before it
// closed the file, say). A failure fails the owning log and is returned by
// every later sync of this segment: the kernel reports a failed writeback
// once, and the pages it could not write may since count as clean.
func (h *segFile) sync() error {
	h.c.mu.Lock()
	err, clean := h.syncErr, h.gen == h.syncedGen
	h.c.mu.Unlock()
	if err != nil || clean {
		return err
	}
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	return h.fsync(f)
}

// fsync fsyncs f, the file, which the caller holds a reference on.
func (h *segFile) fsync(f *os.File) error {
	c := h.c
	h.syncMu.Lock()
	defer h.syncMu.Unlock()
	c.mu.Lock()
	g, err := h.gen, h.syncErr // the writes completed before the fsync starts: it covers them
	c.mu.Unlock()
	if err != nil {
		return err
	}
	err = f.Sync()
	c.mu.Lock()
	switch {
	case err != nil:
		// Reported from now on, and the log fails: the file may close.
		h.syncErr = err
		h.syncedGen = h.gen
	case g > h.syncedGen:
		h.syncedGen = g
	}
	c.mu.Unlock()
	if err != nil {
		h.fail(err)
	}
	return err
}

// shrinkLocked closes unused files, least recently used first, until at
// most limit are open, and starts the cleaner when the unused files left
// need an fsync first. No limit when the capacity is 0. Caller holds c.mu.
func (c *FileCache) shrinkLocked(limit int) {
	if c.capacity <= 0 {
		return
	}
	for c.open > limit && c.clean.Len() > 0 {
		h := c.clean.Back().Value.(*segFile)
		h.unpark()
		_ = h.closeLocked() // every write to it was fsynced
	}
	if c.open > limit && c.dirty.Len() > 0 && !c.cleaning {
		c.cleaning = true
		go c.cleaner()
	}
}

// cleaner fsyncs and closes unused files with unsynced writes while the
// cache is over its capacity.
func (c *FileCache) cleaner() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.open > c.capacity && c.cleanOneLocked() {
	}
	c.cleaning = false
}

// cleanOneLocked fsyncs the least recently used unused file with unsynced
// writes, releasing c.mu during the fsync, and closes it if it is still
// unused and the cache over capacity. It reports whether there was one.
// Caller holds c.mu.
func (c *FileCache) cleanOneLocked() bool {
	e := c.dirty.Back()
	if e == nil {
		return false
	}
	h := e.Value.(*segFile)
	h.unpark()
	h.refs++ // in use by the fsync: nobody closes it meanwhile
	f := h.f
	c.mu.Unlock()
	_ = h.fsync(f) // a failure failed the log
	c.mu.Lock()
	h.refs--
	if h.refs == 0 {
		if h.gone {
			_ = h.closeLocked()
		} else {
			// Least recently used still: first to close.
			h.park(true)
			c.shrinkLocked(c.capacity)
		}
	}
	return true
}
