// Package placement chooses the brokers that host the replicas of new
// partitions: a new topic's, and those added to a topic (the control plane
// passes the same Load either way, which then counts the topic's existing
// partitions too).
//
// Assign is a pure function: no I/O, no clock, no randomness. It places the
// partitions one after another, each replica greedily:
//
//   - The preferred leader (element 0) is the broker that leads the fewest
//     of the partitions placed so far by this call (a topic's leaders are
//     spread over every broker, as Kafka's are, so that its traffic is),
//     then the one with the fewest leaders, then the fewest replicas,
//     counting the existing Load and the partitions placed so far.
//   - Each follower is the broker with the fewest replicas, then on the rack
//     with the fewest replicas per broker, then with the most leaders (a
//     broker short of leaders will soon gain a replica by leading).
//   - A replica only goes to a rack that has not yet reached its share of the
//     partition. The shares fill racks level by level (water-filling): with
//     R racks and rf <= R every rack holds at most one replica of a
//     partition; with rf > R every rack holds floor(rf/R) or one more, unless
//     it has too few brokers, in which case the others make up the rest.
//   - Remaining ties go to the first broker in a fixed order that interleaves
//     racks, as Kafka does: the lowest id of each rack, then the second
//     lowest of each rack, and so on, racks ordered by their lowest id.
//     Without racks this is the order of broker ids.
//
// A broker whose rack is unknown ("") is a rack of its own: nothing says it
// shares a failure domain with any other broker.
//
// Guarantees, by construction:
//   - the replicas of a partition are on distinct brokers;
//   - when the brokers span at least rf racks, on distinct racks; otherwise
//     two racks differ by at most one replica of a partition unless the
//     smaller one has no broker left;
//   - the leader counts of the partitions placed by one call differ by at
//     most one, whatever the Load (partitions added to a topic are spread
//     among themselves; Load does not say which of its leaders are the
//     topic's);
//   - the result depends only on the set of brokers and on Load, not on the
//     order of brokers.
//
// Checked by the property tests (seeded random inputs) rather than proven:
// topics placed one after another from an empty cluster keep the brokers'
// leader counts within one of each other; with empty Load, replica counts
// differ by at most one when every rack has
// the same number of brokers (or no broker has a rack), and between the
// brokers of any one rack otherwise.
package placement
