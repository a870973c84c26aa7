// Package hwcheckpoint is a broker's high-watermark checkpoint (Kafka's
// replication-offset-checkpoint, its OffsetCheckpointFile): one file in
// the broker's data directory, Name, holding the HW of every partition
// replica whose data the broker keeps there, written with Write and read
// with Read. The broker (dataplane/broker) writes it once per interval
// (every second), only when some HW or the set of replicas changed, and
// at shutdown; it reads it at start and opens each replica with its HW
// (dataplane/partition's Spec.HW, which also falls back to the legacy
// per-partition file of older brokers). The file holds every partition
// whose data the broker keeps: the open replicas, and those it no longer
// hosts but whose topic exists (their data stays); the partitions of a
// deleted topic leave it with their data.
//
// The file is replaced atomically (a temporary file, fsynced, renamed,
// the directory fsynced), so 6000 replicas whose HW moved cost one file
// write and two fsyncs a second, not 6000 and 12,000. It is text,
// version 1:
//
//	sluice-replication-offset-checkpoint 1
//	<entry count>
//	<topic id> <partition> <hw>        one line per partition, sorted
//	crc32c <CRC32C of every byte above, 8 hex digits>
//
// What the checkpoint promises is what the per-partition one did: a
// restart resumes from an HW at most one interval old, never a higher one
// than was reached; readers never see the HW go back (a new leader answers
// partition.ErrHWCatchingUp until its HW reaches where its epoch started,
// whatever the checkpoint said), a restarted follower refuses to truncate
// below the checkpointed HW, and retention and tiering stay below it. A
// checkpoint that fails its checks (checksum, syntax, unknown version)
// matches ErrCorrupt and the broker refuses to start, as Kafka takes a
// log dir with a malformed checkpoint offline: the file is written
// atomically, so damage means a disk not to be trusted. An operator who
// judges the disk sound may remove the file: every HW then starts at 0
// (or the legacy file's), which is safe (each replica relearns its HW from
// its leader, a new leader answers ErrHWCatchingUp meanwhile) but for a
// follower's refusal to truncate below its HW, which then only holds
// again once it learned the HW.
package hwcheckpoint
