// Who tells whom what during a communicator's init: the functions that bootstrap_root.cpp, bootstrap.cpp and
// communicator.cpp run, and that collie-sim --init evaluates for any rank count (so the projection is the code's).
//
//   1. Every rank sends the root its PeerInfo (one hello, kBootstrapHelloBytes). The root keeps the N entries
//      (O(N) bytes) and answers each rank with its ring neighbours' entries only (bootstrapPeers: rank - 1 and
//      rank + 1 mod N), so that it sends O(N) bytes in all, 2 entries per rank, instead of the whole table to
//      everyone (O(N^2)).
//   2. The ranks all-gather the rest of the table among themselves in windows that double (tableGatherPlan):
//      rank r holds the entries of a window of ranks centred on itself, [r - R, r + R] mod N, R = 1 from the root's
//      answer. In a round each rank trades with the two ranks at the edges of its window, r + R and r - R (so it
//      always knows the address of whom it talks to, learned in an earlier round or from the root): r + R holds
//      [r, r + 2R] and sends r the R entries after r's window, r - R the R entries before it, and r sends each of
//      them the half of its own window they lack. The window grows from 2R + 1 to 4R + 1 entries; the last round
//      sends only what is still missing (the ceiling of half of it forward, the floor backward). So
//      tableGatherRounds(N) = ceil(log2(N - 1)) - 1 rounds (N >= 4), 2 messages each way per round (sent at once,
//      as one group of Send/Recv through the executor like any call), and each rank receives exactly the N - 3
//      entries it lacked and sends as many: O(N) bytes per rank, each entry once. The pairs connect on first use
//      like any call's; entries are checked (rank field) as they arrive, before anyone dials their address.
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
  std::vector<TableMessage> sends, recvs;  ///< at most two of each (r + R and r - R), none empty
};

/// Whether the ranks all-gather the table after the root's answer (a function of nranks only, so that every rank
/// decides alike): false for three ranks or fewer, whose answer from the root is already the whole table.
bool tableGatherNeeded(int nranks);

/// `rank`'s rounds of the table's all-gather (none when !tableGatherNeeded). Symmetric: every send of p to q in a
/// round is a receive of q from p in the same round, with the same entries.
std::vector<TableRound> tableGatherPlan(int rank, int nranks);

/// The ranks whose PeerInfo the bootstrap root sends `rank`: its ring neighbours (rank +- 1 mod nranks), ascending,
/// without `rank`: every other rank when nranks <= 3. Symmetric: q is in bootstrapPeers(p) exactly when p is in
/// bootstrapPeers(q). The all-gather's first round talks to these only; each later round's partners were learned in
/// an earlier one.
std::vector<int> bootstrapPeers(int rank, int nranks);

/// Every peer `rank` talks to in its tableGatherPlan, ascending (bootstrapPeers among them when it gathers).
std::vector<int> tableGatherPartners(int rank, int nranks);

/// The tableGatherPartners whose links a rank closes after init under lazy connection: all but its ring neighbours
/// (rank +- 1 mod nranks, which ring schedules use; O(1) links kept). Symmetric like bootstrapPeers, so both ends of
/// a link agree to close it.
std::vector<int> gatherOnlyPeers(int rank, int nranks);

/// Rounds of the table's all-gather: ceil(log2(nranks - 1)) - 1, 0 when !tableGatherNeeded (the same on every rank).
int tableGatherRounds(int nranks);

}  // namespace collie::core
