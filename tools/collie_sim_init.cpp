// collie-sim --init: what a communicator's init costs at rank counts this machine cannot run, computed from the code
// that runs it: who the bootstrap root answers with what (core/bootstrap_plan.hpp: bootstrapNeighbours, the
// functions bootstrap_root.cpp and bootstrap.cpp call), the wire sizes (core/bootstrap_wire.hpp), the ring
// all-gather of the PeerInfo table, calibration's broadcast under the tuner's choice (core/tuner.hpp), and the peers
// a first AllReduce connects to (the schedules algorithms::build makes for a sample of ranks). Beside it, the same
// counts for the full-table bootstrap and full-mesh connection collie had before (eager).
//
//   collie-sim --init --ranks 1024,4096,32768,131072 [--bytes 8] [--sockets 2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/bootstrap_wire.hpp"
#include "core/tuner.hpp"

namespace collie::sim {
namespace {

using algorithms::Algorithm;
using algorithms::Collective;

/// The peers `rank`'s schedule of coll under algo names (sends and receives), without itself.
std::set<int> schedulePeers(Algorithm algo, Collective coll, int rank, int nranks, size_t count) {
  algorithms::ScheduleKey key;
  key.coll = coll;
  key.rank = rank;
  key.nranks = nranks;
  key.count = count;
  std::set<int> peers;
  for (const algorithms::Step& s : algorithms::build(algo, key).steps) {
    if (s.sendPeer >= 0 && s.sendPeer != rank) peers.insert(s.sendPeer);
    if (s.recvPeer >= 0 && s.recvPeer != rank) peers.insert(s.recvPeer);
  }
  return peers;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void project(int n, size_t allReduceBytes, int sockets) {
  const double info = sizeof(transport::PeerInfo);
  // 1. The root: one hello in from each rank, one reply out to each, holding the N entries.
  double rootOut = 0;
  size_t maxReply = 0;
  for (int r = 0; r < n; ++r) {
    const size_t reply =
        core::kBootstrapReplyHeaderBytes + core::bootstrapNeighbours(r, n).size() * sizeof(transport::PeerInfo);
    rootOut += static_cast<double>(reply);
    maxReply = std::max(maxReply, reply);
  }
  const double rootIn = static_cast<double>(n) * static_cast<double>(core::kBootstrapHelloBytes);
  const double rootOutBefore = static_cast<double>(n) * (core::kBootstrapReplyHeaderBytes + n * info);
  // 2. The ring all-gather of the table (nothing when the root's answer already holds everyone).
  const bool gather = !core::bootstrapNeighboursAreEveryone(n);
  const double rounds = gather ? n - 1 : 0;
  const double bytesPerRank = gather ? (n - 1) * info : 0;
  // 3. Calibration's broadcast (a Wire of rank 0, about 200 B) and the first AllReduce, as the tuner picks them with
  //    the built-in tcp costs; the peers of a sample of ranks (rank 0, the middle one, the last one).
  core::Tuner tuner;
  const Algorithm bcast = tuner.choose(Collective::Broadcast, n, 200).algorithm;
  const Algorithm allReduce = tuner.choose(Collective::AllReduce, n, allReduceBytes).algorithm;
  size_t maxPeers = 0;
  for (int r : {0, n / 2, n - 1}) {
    std::set<int> peers;
    for (int p : core::bootstrapNeighbours(r, n)) peers.insert(p);
    for (int p : schedulePeers(bcast, Collective::Broadcast, r, n, 200)) peers.insert(p);
    if (r == 0 && n > 1) peers.insert(1);  // calibration's ping-pong partner (rank 0's first peer per kind)
    for (int p : schedulePeers(allReduce, Collective::AllReduce, r, n, std::max<size_t>(allReduceBytes / 4, 1)))
      peers.insert(p);
    maxPeers = std::max(maxPeers, peers.size());
  }
  std::printf("%8d | %9s %9s %10s | %9s | %6.0f %9s %9s | %-5s %-5s %5zu %6zu | %8d %8d\n", n, human(rootIn).c_str(),
              human(rootOut).c_str(), human(rootOutBefore).c_str(), human(static_cast<double>(maxReply)).c_str(),
              rounds, human(bytesPerRank).c_str(), human(n * info).c_str(), algorithms::algorithmName(bcast),
              algorithms::algorithmName(allReduce), maxPeers, maxPeers * static_cast<size_t>(sockets) + 3, n - 1,
              (n - 1) * sockets + 3);
}

}  // namespace

int runInitProjection(int argc, char** argv) {
  std::vector<int> sizes = {1024, 4096, 32768, 131072};
  size_t bytes = 8;
  int sockets = 2;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) {
      sizes.clear();
      for (const char* p = argv[++i]; *p;) {
        sizes.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else if (a == "--bytes" && i + 1 < argc) {
      bytes = static_cast<size_t>(std::atoll(argv[++i]));
    } else if (a == "--sockets" && i + 1 < argc) {
      sockets = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s --init [--ranks 1024,4096,32768,131072] [--bytes B of the first AllReduce (8)] "
                   "[--sockets tcp sockets per peer (2)]\n",
                   argv[0]);
      return 2;
    }
  }
  for (int n : sizes) {
    if (n < 1 || n > (1 << 20)) {
      std::fprintf(stderr, "%s --init: --ranks %d: expected 1..%d\n", argv[0], n, 1 << 20);
      return 2;
    }
  }
  std::printf(
      "# init of one communicator, per the code (PeerInfo %zu B, hello %zu B, reply header %zu B); "
      "first AllReduce %zu B; tcp with %d sockets per peer\n",
      sizeof(transport::PeerInfo), core::kBootstrapHelloBytes, core::kBootstrapReplyHeaderBytes, bytes, sockets);
  std::printf(
      "#   root: bytes in (hellos), out (neighbour replies), out before (the whole table to every rank)\n"
      "#   reply: largest reply a rank reads from the root\n"
      "#   ring all-gather of the table per rank: rounds, bytes sent (and received), table held\n"
      "#   connections per rank after init and a first AllReduce (tuner's algorithms for calibration's "
      "broadcast and the AllReduce), descriptors (tcp sockets + listener, epoll, eventfd), worst of ranks 0, "
      "N/2, N-1;\n"
      "#   eager (before): N-1 peers and their descriptors\n");
  std::printf("%8s | %9s %9s %10s | %9s | %6s %9s %9s | %-5s %-5s %5s %6s | %8s %8s\n", "ranks", "root_in", "root_out",
              "before", "reply", "rounds", "sent", "held", "bcast", "AR", "peers", "fds", "eager_pe", "eager_fd");
  for (int n : sizes) collie::sim::project(n, bytes, sockets);
  return 0;
}

}  // namespace collie::sim
