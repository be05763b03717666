// Who tells whom what during a communicator's init: the functions that bootstrap_root.cpp, bootstrap.cpp and
// communicator.cpp run, and that collie-sim --init evaluates for any rank count (so the projection is the code's).
//
//   1. Every rank sends the root its PeerInfo (one hello, kBootstrapHelloBytes). The root keeps the N entries
//      (O(N) bytes) and answers each rank with the entries of the peers that rank's part of the table's all-gather
//      talks to (bootstrapPeers: at most floor(log2 N) + 1 of them), so that it sends O(N log N) bytes in all
//      instead of the whole table to everyone (O(N^2)), and each rank reads O(log N) entries.
//   2. The ranks all-gather their PeerInfo with the halving-doubling schedule of src/algorithms/rhd.cpp (recursive
//      doubling; for N = 2^k + e, each even rank among the first 2e first hands its entry to its odd neighbour
//      and gets the whole table back at the end), run by the executor like any AllGather (the tuner is
//      held to that algorithm meanwhile): tableGatherRounds(N) = log2 N rounds for a power of two, else
//      floor(log2 N) + 2 = ceil(log2 N) + 1 (its longest chain of messages is ceil(log2 N) for some N, never
//      less), O(N) bytes sent and received per rank. The peers it talks to are exactly bootstrapPeers, connected on
//      first use like any call's. A rank then knows where every peer listens, and connects to the others only when
//      a call needs them. With two ranks or fewer the root's answer is the whole table and nothing is gathered.
//   3. Calibration (calibrate.cpp) broadcasts under the tuner's choice and rank 0 ping-pongs with its first peer
//      per transport kind.
//   4. Under lazy connection each rank closes its links to gatherOnlyPeers (bootstrapPeers other than its ring
//      neighbours; release_gather_links.cpp: a goodbye each way, then both ends close), so that descriptors per
//      rank after init do not grow with N; a later call that needs such a peer connects it again on first use.
// Nothing else is exchanged at init.
#pragma once

#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"

namespace collie::core {

/// The algorithm of the table's all-gather, and the COLLIE_ALGO-style selection that holds the tuner to it.
inline constexpr algorithms::Algorithm kTableGatherAlgorithm = algorithms::Algorithm::HalvingDoubling;
std::string tableGatherSelection();

/// Whether the ranks all-gather the table after the root's answer (a function of nranks only, so that every rank
/// decides alike): false for one or two ranks, whose answer from the root is already the whole table.
bool tableGatherNeeded(int nranks);

/// `rank`'s schedule for the table's all-gather: blocks of sizeof(PeerInfo) bytes (one per rank).
algorithms::Schedule tableGatherSchedule(int rank, int nranks);

/// The ranks whose PeerInfo the bootstrap root sends `rank`: the peers its tableGatherSchedule sends to or receives
/// from (every other rank when !tableGatherNeeded), ascending, without `rank`. Symmetric: q is in bootstrapPeers(p)
/// exactly when p is in bootstrapPeers(q), so both ends of every link the all-gather uses know each other.
std::vector<int> bootstrapPeers(int rank, int nranks);

/// The bootstrapPeers whose links a rank closes after init under lazy connection: all but its ring neighbours
/// (rank +- 1 mod nranks, which ring schedules and the halving-doubling's first round use; O(1) links kept), none
/// when !tableGatherNeeded. Symmetric like bootstrapPeers, so both ends of a link agree to close it.
std::vector<int> gatherOnlyPeers(int rank, int nranks);

/// Rounds of the table's all-gather (0 when !tableGatherNeeded): the doubling's log2 of the largest power of two
/// <= nranks, plus two when ranks fold (their entries in, the whole table back out). No chain of messages in it is
/// longer (tests/unit/test_bootstrap_plan.cpp runs it in the simulator).
int tableGatherRounds(int nranks);

}  // namespace collie::core
