// Who tells whom what during a communicator's init: the pure functions that bootstrap_root.cpp, bootstrap.cpp and
// communicator.cpp run, and that collie-sim --init evaluates for any rank count (so the projection is the code's).
//
//   1. Every rank sends the root its PeerInfo (one hello, kBootstrapHelloBytes). The root keeps the N entries
//      (O(N) bytes) and answers each rank with the entries of its ring neighbours only (bootstrapNeighbours: at most
//      two), so that it sends O(N) bytes in all instead of the whole table to everyone (O(N^2)).
//   2. Each rank connects to its ring neighbours (on first use, like any call) and the ranks all-gather their
//      PeerInfo on the ring: N - 1 steps, each rank sending and receiving (N - 1) x sizeof(PeerInfo) bytes. A rank
//      then knows where every peer listens, and connects to the others only when a call needs them.
//   3. Calibration (calibrate.cpp) broadcasts on the same ring and rank 0 ping-pongs with its first peer per
//      transport kind.
// Nothing else is exchanged at init.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace collie::core {

/// The ranks whose PeerInfo the bootstrap root sends `rank` (its ring neighbours rank - 1 and rank + 1, modulo
/// nranks), ascending, without `rank` itself and without duplicates: empty for one rank, one entry for two.
inline std::vector<int> bootstrapNeighbours(int rank, int nranks) {
  std::vector<int> out;
  if (nranks <= 1) return out;
  const int prev = (rank + nranks - 1) % nranks, next = (rank + 1) % nranks;
  out.push_back(prev < next ? prev : next);
  if (next != prev) out.push_back(prev < next ? next : prev);
  return out;
}

/// Whether the root's answer to every rank already holds every peer (no all-gather is needed: three ranks or fewer).
inline bool bootstrapNeighboursAreEveryone(int nranks) { return nranks <= 3; }

}  // namespace collie::core
