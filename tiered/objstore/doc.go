// Package objstore is Sluice's seam to object storage: the cold tier that holds closed log segments
// and their indexes (DESIGN.md §6). [Store] is deliberately small (whole-object Put, ranged Get,
// Head, Delete, List) so that every backend can keep the same promises, and one acceptance suite
// (package objstoretest) proves them for every backend:
//
//   - tiered/objstore/s3: any S3-compatible service through aws-sdk-go-v2 (AWS, versitygw, MinIO,
//     SeaweedFS, R2).
//   - tiered/objstore/folder: a local directory, for `sluice dev` and tests.
//
// [Instrument] wraps any Store with Prometheus metrics.
//
// # Model
//
// An object is an immutable byte string under a key; Put replaces it whole. The store is strongly
// consistent: once Put returns nil, every later Head, Get and List sees the new object; once
// Delete returns nil, none of them sees it. (Amazon S3 has been strongly read-after-write consistent
// for all operations, including overwrites, deletes and listings, since December 2020; the folder
// backend gets it from rename(2) and unlink(2).) A reader never observes a partial object: a Get
// that races a Put of the same key returns either all of the old bytes or all of the new ones, and
// an interrupted Put leaves the old object (or none) in place.
//
// Every operation is idempotent in effect: putting the same bytes twice, or deleting twice, leaves
// the store as doing it once would. Callers may therefore retry any operation after an error whose
// outcome they do not know.
//
// # Keys
//
// Keys are '/'-separated paths of at most [MaxKeyLen] bytes of valid UTF-8, checked by [ValidateKey]
// before any backend sees them: not empty, no leading or trailing '/', no empty, "." or ".."
// segment, no NUL byte. Sluice's keys look like
// tenants/<tenant>/topics/<topic-id>/<partition>/<base>-<epoch>-<uuid>.log; the tenant id comes
// first so that one tenant's objects are one prefix.
//
// Backends that map keys to a file system (the folder backend, and S3 gateways such as versitygw's
// posix backend) cannot hold both an object "a" and an object "a/b"; such a Put fails. Sluice's key
// scheme never needs both.
//
// # Errors
//
// Backends translate their errors once: a missing object is always [ErrNotFound] (test with
// errors.Is), a bad key [ErrInvalidKey], a range past the end of an object [ErrOutOfRange], a body
// whose length differs from the size given to Put [ErrSizeMismatch]. An operation stopped by its
// context returns an error for which errors.Is(err, ctx.Err()) holds.
package objstore
