// Who tells whom what during a communicator's init: the functions that bootstrap_root.cpp, bootstrap.cpp and
// communicator.cpp run, and that collie-sim --init evaluates for any rank count (so the projection is the code's).
//
//   1. Every rank sends the root its PeerInfo (one hello, kBootstrapHelloBytes). The root keeps the N entries
//      (O(N) bytes) and answers each rank with the entries of its neighbours in a binary tree over the ranks
//      (bootstrapPeers: its parent and up to two children, treePlace), so that it sends O(N) bytes in all, at most 3
//      entries per rank, instead of the whole table to everyone (O(N^2)).
//   2. The ranks all-gather the rest of the table along that tree (tableGatherPlan). The tree is in order, rotated so
//      that rank 0 is its root (rank 0 then has links to two peers for calibration's fan-out): in positions
//      rank + N/2 mod N the root is the middle of [0, N) and each node the middle of the part of its parent's range
//      on its side, so every subtree holds a contiguous range of ranks [lo, hi) (mod N). A node receives its children's
//      ranges and sends its own range [lo, hi) to its parent. Everything else ([hi, lo) mod N) streams down from the
//      parent in chunks of tableChunkEntries (N over the tree's height, at least kMinTableChunk entries): in down round
//      k a node receives chunk k and sends each child the chunks of that child's stream (everything but its range)
//      that it holds by then, so a chunk goes on one round after it came and the table reaches the leaves in about
//      height + chunks chunk times rather than height whole tables (at 128k ranks 17 table transfers on the critical
//      path otherwise). Every rank talks to the ranks the root named and no other; the longest chain of messages is
//      twice the tree's height, 2 floor(log2 N) (a leaf's range up to the root and the table back down), plus at most
//      the chunks (tableGatherCost evaluates every rank's plan); a rank receives the N - 1 others and sends at most
//      2N + 1 (O(N) bytes) and connects to at most 3 peers, N - 1 pairs in all: where each rank dials O(log N)
//      partners (recursive doubling), the handshakes of a large job on few hosts, which its processes' accept threads
//      serve, grow as N log N. Each rank's rounds (children's ranges in, then one per chunk in and one to finish: at
//      most floor(log2 N) + 2) run one after another as groups of Send/Recv through the executor like any call;
//      entries are checked (rank field) as they arrive.
//   3. Calibration (calibrate.cpp) broadcasts under the tuner's choice and rank 0 ping-pongs with its first peer
//      per transport kind.
//   4. Under lazy connection each rank closes its links to gatherOnlyPeers (the all-gather's partners other than its
//      ring neighbours; release_gather_links.cpp: a goodbye each way, then both ends close), so that descriptors per
//      rank after init do not grow with N; a later call that needs such a peer connects it again on first use.
// Nothing else is exchanged at init. With three ranks or fewer the root's answer is the whole table.
#pragma once

#include <vector>

namespace collie::core {

/// One message of the table's all-gather: the entries of ranks first, first + 1, ... (count of them, mod N) between
/// this rank and `peer`.
struct TableMessage {
  int peer = -1;
  int first = 0;
  int count = 0;
};

/// One round of the table's all-gather on one rank: everything in it is posted at once (no message of a round
/// depends on another of the same round); the next round starts once all of it is done.
struct TableRound {
  std::vector<TableMessage> sends, recvs;  ///< at most two of each, none empty
};

/// Where a rank sits in the all-gather's tree: its subtree's ranks, `size` of them from `first` on (mod N; it is the
/// middle one, leftSize ranks after `first`), its parent and its children (-1: none). Rank 0 is the root.
struct TreePlace {
  int first = 0, size = 0, leftSize = 0;
  int parent = -1, left = -1, right = -1;
};
TreePlace treePlace(int rank, int nranks);

/// Whether the ranks all-gather the table after the root's answer (a function of nranks only, so that every rank
/// decides alike): false for three ranks or fewer, whose answer from the root is already the whole table.
bool tableGatherNeeded(int nranks);

/// Entries per message of the all-gather's down phase (tableGatherPlan's chunk) unless COLLIE_INIT_CHUNK says
/// otherwise: the table's length over the tree's height, at least kMinTableChunk, so that a leaf's stream comes in at
/// most floor(log2 N) chunks, each long enough to cost more than its latency (a stream of up to 683 entries, so below
/// 685 ranks, is one message; a leaf's at 1,024 ranks two).
constexpr int kMinTableChunk = 683;  // 64 KiB of PeerInfo: 52 us at 10 Gbit/s
int tableChunkEntries(int nranks);

/// `rank`'s rounds of the table's all-gather (none when !tableGatherNeeded), the down phase in messages of at most
/// `chunk` entries (0: tableChunkEntries). Matched: the sends of p to q, in order, are the receives of q from p, in
/// order, with the same entries, when every rank passes the same chunk.
std::vector<TableRound> tableGatherPlan(int rank, int nranks, int chunk = 0);

/// The ranks whose PeerInfo the bootstrap root sends `rank`: its tree neighbours (parent and children), ascending:
/// every other rank when nranks <= 3. Symmetric: q is in bootstrapPeers(p) exactly when p is in bootstrapPeers(q).
/// The all-gather talks to these only.
std::vector<int> bootstrapPeers(int rank, int nranks);

/// Whether `holder`'s subtree in the all-gather's tree (treePlace) contains `rank`: under COLLIE_PEER_CARDS=directory
/// the ranks whose contact cards `holder` keeps after init (the up phase brought them; rank 0 keeps every card).
bool subtreeHolds(int holder, int rank, int nranks);

/// Under COLLIE_PEER_CARDS=directory, the ranks whose whole contact card `rank` gets before the all-gather (from the
/// bootstrap root, or for a shrink's or split's child by asking the parent's directory): its bootstrapPeers, rank 0
/// and rank 0's children (so that a rank whose parent is gone can still ask the top of the tree), ascending, without
/// `rank`.
std::vector<int> directorySeeds(int rank, int nranks);

/// The ranks whose PeerInfo the bootstrap root sends `rank`, in this order: bootstrapPeers, or with `cardDirectory`
/// directorySeeds.
std::vector<int> rootAnswerRanks(int rank, int nranks, bool cardDirectory);

/// Every peer `rank` talks to in its tableGatherPlan, ascending (bootstrapPeers when it gathers, else none).
std::vector<int> tableGatherPartners(int rank, int nranks);

/// The tableGatherPartners whose links a rank closes after init under lazy connection: all but its ring neighbours
/// (rank +- 1 mod nranks, which ring schedules use; O(1) links kept). Symmetric like bootstrapPeers, so both ends of
/// a link agree to close it.
std::vector<int> gatherOnlyPeers(int rank, int nranks);

/// What the table's all-gather costs on its critical path, from every rank's tableGatherPlan (collie-sim --init):
/// a round starts once the rank's previous round is done and is done once each of its receives has arrived; a
/// message arrives `perMessage` + `perEntry` x the entries sent to that peer in that round so far (itself included)
/// after the start of the round that sends it (a pair's messages of one round go one after another; a rank's sends
/// to different peers go at once). perMessage 1, perEntry 0: the longest chain of messages.
struct TableGatherCost {
  int rounds = 0;     ///< the most rounds a rank runs
  double finish = 0;  ///< when the last rank has the whole table
};
TableGatherCost tableGatherCost(int nranks, double perMessage, double perEntry, int chunk = 0);

}  // namespace collie::core
