// Package group is the state machine of one consumer group: membership,
// server-side assignment and cooperative rebalancing, modelled on Kafka's
// next-generation consumer rebalance protocol (KIP-848). The group's
// coordinator (dataplane/coordinator) keeps one Group per group, runs the
// GroupHeartbeat and LeaveGroup RPCs its broker receives as Heartbeat and
// Leave, checks offset commits with Owns, and persists the committed
// offsets itself.
//
// # Model
//
// Members heartbeat. A heartbeat joins (member epoch 0), leaves for good
// (-1), leaves temporarily as a static member (-2), or carries the member's
// epoch; it may change the member's subscriptions and reports the
// partitions the member owns.
//
// The group epoch increases when the membership, a subscription, or the
// partition count of a subscribed topic changes (the broker's metadata is
// read at every heartbeat through Topics). Each increase computes, in the
// same call, a target assignment at that epoch with the group's assignor
// (AssignorUniform, sticky, or AssignorRange); so the target epoch always
// equals the group epoch.
//
// Each member moves towards its part of the target on its own heartbeats.
// It holds partitions: those it has been given (its assignment, which every
// response carries in full) and those it has been asked to revoke and has
// not yet acknowledged. Reconciling a member at a heartbeat:
//
//  1. Partitions it was asked to revoke and no longer reports owning are
//     released: nobody holds them any more.
//  2. Partitions it holds that are not in its target are to be revoked: the
//     response leaves them out. Everything else it holds stays in the
//     response, so a member never pauses a partition it keeps. (A partition
//     back in its target before the member let go of it is simply kept.)
//  3. While it has partitions to revoke, its member epoch stays where it is.
//     Once it has none, its epoch becomes the target epoch and it is given
//     the target partitions that nobody holds; the others stay pending and
//     are given at a later heartbeat, once their holder released them.
//
// So a partition moves from A to B in three heartbeats: A's, which asks A
// to revoke it; A's next, without it in A's owned partitions, which
// releases it; and B's next, which gives it to B. A revocation is only ever
// acknowledged by a heartbeat after the one whose response asked for it,
// so a slow client that reported its partitions before it had taken the
// ones it was just given cannot release them by accident.
//
// Invariants, which the tests check after every step:
//
//   - At any time a partition is held by at most one member, and it is
//     given to a member only when no member holds it.
//   - A member's assignment loses a partition only when the partition left
//     its target; a member whose target keeps everything it holds is never
//     asked to give up anything.
//   - Member epochs never exceed the group epoch, and a member reaches the
//     target epoch only with nothing left to revoke.
//   - Everything is deterministic: the same calls with the same times give
//     the same state, member ids aside (Config.NewMemberID).
//
// # Worked example
//
// Topic t has 6 partitions; members a and b are stable at group epoch 2
// with a: t:0,1,2 and b: t:3,4,5 (testdata/cooperative.txt).
//
//	c joins                    group epoch 3; target a: t:0,1  b: t:3,4  c: t:2,5
//	                           c: epoch 3, assignment -   (t:2,5 pending)
//	a heartbeats (owns 0,1,2)  a: epoch 2, assignment t:0,1   (revoking t:2)
//	c heartbeats               c: epoch 3, assignment -   (a still holds t:2)
//	a heartbeats (owns 0,1)    a: epoch 3, assignment t:0,1   (t:2 released)
//	c heartbeats               c: epoch 3, assignment t:2
//	b heartbeats (owns 3,4,5)  b: epoch 2, assignment t:3,4   (revoking t:5)
//	b heartbeats (owns 3,4)    b: epoch 3, assignment t:3,4
//	c heartbeats               c: epoch 3, assignment t:2,5   stable
//
// a kept consuming t:0 and t:1 and b t:3 and t:4 throughout; only t:2 and
// t:5 paused, each between its revocation and c's next heartbeat.
//
// # Epochs and fencing
//
// A regular heartbeat must carry the member's epoch. Its previous epoch is
// accepted too when the heartbeat reports owning only partitions the member
// has been given (it missed the response that moved it on; KIP-848 does the
// same); the response then carries the current epoch. Any other epoch is
// ErrFencedMemberEpoch: the client drops its partitions and rejoins with
// epoch 0 and its member id, which resets the member (see below). A member
// id the group does not know is ErrUnknownMember.
//
// Owns decides offset commits: the member must hold the partition (given,
// or being revoked and not yet acknowledged: a client commits in its
// revocation callback), and the epoch must be its current one, or its
// previous one if it already held the partition at that epoch (a commit
// sent just before the response that moved it on). Each held partition
// records the epoch at which it was given, so a commit at the previous
// epoch for a partition given at the current one is ErrNotOwned.
//
// # Joining, leaving, timeouts
//
//   - A join (MemberID "", epoch 0) creates a member with a new id. It may
//     report partitions it owns from a previous membership: the assignor
//     keeps them with it where balance allows and nobody else holds them, and
//     it is given them at once (see Failover).
//   - A join with a known member id (epoch 0) resets that member: everything
//     it held is released, then it is reconciled from scratch, so it gets
//     back what nobody else took, including what it reports owning. No
//     epoch bump unless its subscriptions change.
//   - Epoch -1 (or Leave) removes the member; its partitions are free at
//     once and the group rebalances.
//   - Session timeout: a member that does not heartbeat for
//     Config.SessionTimeout is removed, its partitions free at once.
//   - Rebalance timeout: a member that still holds partitions it was asked
//     to revoke HeartbeatRequest.RebalanceTimeout after it was first asked
//     is removed too (KIP-848), however well it heartbeats.
//   - Static membership (KIP-345): a member with an instance id that leaves
//     with epoch -2 keeps its slot, its target and the partitions it was
//     given (not those it was revoking) for the session timeout; nobody
//     consumes them meanwhile. A join (member id "") with the same
//     instance id takes the slot over under a new member id, with the same
//     assignment and epoch, without a rebalance: no other member's epoch,
//     target or assignment changes (unless the new process subscribes to
//     other topics, which bumps the epoch like any subscription change).
//     It does so whether or not the old member left: a process killed
//     with SIGKILL never sent epoch -2, and its replacement must not wait
//     for the session timeout. What the old incarnation was revoking is
//     released at once (the new process does not own it), so a rebalance
//     in progress goes on. The old member id is fenced from then on:
//     its heartbeats, leaves and offset commits that name the instance id
//     are ErrFencedInstanceID, and its client must stop rather than
//     rejoin, or two processes would steal the slot from each other in
//     turn. (Kafka's classic protocol does the same; KIP-848 answers
//     UNRELEASED_INSTANCE_ID instead while the old member is live, which
//     leaves a crashed static member out until its session expires.)
//     A known member id rejoining with epoch 0 is not a replacement: it
//     is reset in place (above).
//
// Removal by timeout happens in Expire and, lazily, at the start of every
// method, all of which take the current time.
//
// # Client contract
//
// A client reports in Owned what it consumes when it sends the heartbeat
// (nil: unchanged since its last heartbeat). On a response it stops
// consuming the owned partitions missing from Assignment (committing their
// offsets first), reports them gone in a later heartbeat, and starts the new
// ones. On ErrUnknownMember it pauses its partitions and joins again with
// MemberID "" reporting them, then resumes those the response assigns; on
// ErrFencedMemberEpoch it drops them and rejoins with its member id. A
// static member sends its instance id with every request, and on
// ErrFencedInstanceID drops its partitions and stops for good.
//
// # Failover
//
// Only committed offsets and, for static members, the member id of each
// instance id's latest incarnation survive a coordinator failover. The
// coordinator writes the latter to its replicated log before it answers a
// join that changes it, and gives it back to the new Group with
// RestoreInstance, so a fenced process stays fenced across the failover.
// A new Group starts with no members, and members learn it at their next
// heartbeat (ErrUnknownMember), then join again reporting what they own. With the uniform assignor each
// keeps its partitions, provided the ones that have not rejoined yet are
// not handed to the first members back: until Config.HoldUntil, partitions
// nobody holds go only to a member that reports owning them
// (StateAssigning while some are held back). The group cannot tell a
// member that is slow to come back, still consuming, from one that is
// gone, so the hold must last as long as the old coordinator would have
// waited for a silent member: a session timeout, from when the new
// coordinator started serving (the broker sets it so for groups that
// existed before: they have committed offsets). Partitions of members that
// never come back are handed out when it ends. A shorter hold (one
// heartbeat interval plus a coordinator lookup, say) gives a slow member's
// partitions to another while it still consumes them. The range assignor
// orders dynamic members by member id, which changes with every rejoin, so
// it keeps partitions in place across a failover only for static members
// (ordered by instance id).
//
// # Hosting
//
// Group does no I/O, starts no goroutines and reads no clock; it is not
// safe for concurrent use, and the caller serialises every call for a group
// (dataplane/coordinator holds one lock per offsets partition). Topics must be
// authoritative: a topic it reports missing is treated as deleted and its
// partitions are revoked. The broker calls Expire on a timer (every
// heartbeat interval, say) so that idle groups expire too, refuses
// ResetOffsets unless Empty, and accepts commits from members after Owns
// returns nil.
//
// Differences from Kafka: membership is not persisted beyond the instance
// ids' incarnations (see Failover);
// member ids come from the group rather than the client (KIP-1082), so a
// join whose response is lost leaves a member that holds partitions until
// its session expires; a revocation is released only by a later heartbeat
// (Kafka also accepts the one that triggered it when its owned partitions
// already lack it); no rack awareness, regular expression subscriptions or
// client-side assignors.
package group
