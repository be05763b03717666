// collie-sim --init: what a communicator's init costs at rank counts this machine cannot run, computed from the code
// that runs it: who the bootstrap root answers with what (core/bootstrap_plan.hpp: bootstrapPeers, the function
// bootstrap_root.cpp and bootstrap.cpp call), the wire sizes (core/bootstrap_wire.hpp), the table's all-gather
// (every rank's tableGatherPlan, and tableGatherCost: its critical path in messages and in entries), calibration's
// broadcast under the tuner's choice (core/tuner.hpp), and the peers a first AllReduce connects to (the schedules
// algorithms::build makes for a sample of ranks). Beside it, the same counts for the full-table bootstrap and
// full-mesh connection collie had before (eager).
//
//   collie-sim --init --ranks 1024,4096,32768,131072 [--bytes 8] [--sockets 2] [--chunk 0] [--cards all|directory]
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
#include "core/card_directory.hpp"
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

void project(int n, size_t allReduceBytes, int sockets, int chunk, bool directory) {
  const double info = sizeof(transport::PeerInfo);
  // Under a directory (COLLIE_PEER_CARDS=directory) the down phase carries host records, and a rank knows the cards
  // of its subtree and its seeds (core/card_directory.hpp).
  const size_t downEntry = directory ? sizeof(core::HostRecord) : sizeof(transport::PeerInfo);
  double cardsKnown = 0, receivedInAll = 0;
  // 1. The root: one hello in from each rank, one reply out to each (its bootstrapPeers), holding the N entries.
  double rootOut = 0;
  size_t maxEntries = 0;
  // 2. The table's all-gather: every rank's plan (what it sends, how many messages, what it receives).
  size_t maxMessages = 0, maxSent = 0, maxReceived = 0;
  for (int r = 0; r < n; ++r) {
    const size_t entries = core::rootAnswerRanks(r, n, directory).size();
    cardsKnown += directory ? static_cast<double>(core::treePlace(r, n).size - 1 + entries) : n - 1;
    rootOut += static_cast<double>(core::kBootstrapReplyHeaderBytes + entries * sizeof(transport::PeerInfo));
    maxEntries = std::max(maxEntries, entries);
    if (!core::tableGatherNeeded(n)) continue;
    size_t messages = 0, sent = 0, received = 0;
    const int parent = core::treePlace(r, n).parent;  // messages from it and to the children go down the tree
    for (const core::TableRound& round : core::tableGatherPlan(r, n, chunk)) {
      for (const core::TableMessage& m : round.sends) {
        ++messages;
        sent += static_cast<size_t>(m.count) * (m.peer == parent ? sizeof(transport::PeerInfo) : downEntry);
      }
      for (const core::TableMessage& m : round.recvs)
        received += static_cast<size_t>(m.count) * (m.peer == parent ? downEntry : sizeof(transport::PeerInfo));
    }
    maxMessages = std::max(maxMessages, messages);
    maxSent = std::max(maxSent, sent);
    maxReceived = std::max(maxReceived, received);
    receivedInAll += static_cast<double>(received);
  }
  const core::TableGatherCost inMessages = core::tableGatherCost(n, 1, 0, chunk);
  const int gatherRounds = inMessages.rounds, chainMessages = static_cast<int>(inMessages.finish);
  const double chainEntries = core::tableGatherCost(n, 0, 1, chunk).finish;
  const double rootIn = static_cast<double>(n) * static_cast<double>(core::kBootstrapHelloBytes);
  const double rootOutBefore = static_cast<double>(n) * (core::kBootstrapReplyHeaderBytes + n * info);
  // 3. Calibration's broadcast (a Wire of rank 0, about 200 B) and the first AllReduce, as the tuner picks them with
  //    the built-in tcp costs; the peers of a sample of ranks (rank 0, 1, the middle one, the last one).
  core::Tuner tuner;
  const Algorithm bcast = tuner.choose(Collective::Broadcast, n, 200, 1).algorithm;                 // bytes
  const Algorithm allReduce = tuner.choose(Collective::AllReduce, n, allReduceBytes, 4).algorithm;  // float32
  //    Init then closes the links to gatherOnlyPeers (the all-gather's partners but ring neighbours), whatever
  //    calibration did on them.
  size_t maxPeers = 0, maxInitPeers = 0;
  for (int r : {0, std::min(1, n - 1), n / 2, n - 1}) {
    std::set<int> peers;
    for (int p : core::bootstrapPeers(r, n)) peers.insert(p);  // the all-gather's partners (not the directory's seeds)
    for (int p : schedulePeers(bcast, Collective::Broadcast, r, n, 200)) peers.insert(p);
    if (r == 0 && n > 1) peers.insert(1);  // calibration's ping-pong partner (rank 0's first peer per kind)
    for (int p : core::gatherOnlyPeers(r, n)) peers.erase(p);
    maxInitPeers = std::max(maxInitPeers, peers.size());
    for (int p : schedulePeers(allReduce, Collective::AllReduce, r, n, std::max<size_t>(allReduceBytes / 4, 1)))
      peers.insert(p);
    maxPeers = std::max(maxPeers, peers.size());
  }
  std::printf(
      "%8d | %9s %9s %10s | %5zu %9s | %6d %5d %9s %5zu %9s %9s %9s %9s %7.1f | %-5s %-5s %4zu %5zu %6zu | %8d %8d\n",
      n, human(rootIn).c_str(), human(rootOut).c_str(), human(rootOutBefore).c_str(), maxEntries,
      human(static_cast<double>(core::kBootstrapReplyHeaderBytes + maxEntries * sizeof(transport::PeerInfo))).c_str(),
      gatherRounds, chainMessages, human(chainEntries * info).c_str(), maxMessages,
      human(static_cast<double>(maxSent)).c_str(), human(static_cast<double>(maxReceived)).c_str(),
      human(receivedInAll / n).c_str(), human(n * info).c_str(), cardsKnown / n, algorithms::algorithmName(bcast),
      algorithms::algorithmName(allReduce), maxInitPeers, maxPeers, maxPeers * static_cast<size_t>(sockets) + 3, n - 1,
      (n - 1) * sockets + 3);
}

}  // namespace

int runInitProjection(int argc, char** argv) {
  std::vector<int> sizes = {1024, 4096, 32768, 131072};
  size_t bytes = 8;
  int sockets = 2, chunk = 0;
  bool directory = false;
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
    } else if (a == "--chunk" && i + 1 < argc) {
      chunk = std::atoi(argv[++i]);
    } else if (a == "--cards" && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "all") == 0 || std::strcmp(argv[i + 1], "directory") == 0)) {
      directory = std::strcmp(argv[++i], "directory") == 0;
    } else {
      std::fprintf(
          stderr,
          "usage: %s --init [--ranks 1024,4096,32768,131072] [--bytes B of the first AllReduce (8)] "
          "[--sockets tcp sockets per peer (2)] [--chunk entries per message of the table's down phase (0: the "
          "default, as COLLIE_INIT_CHUNK)] [--cards all|directory (as COLLIE_PEER_CARDS)]\n",
          argv[0]);
      return 2;
    }
  }
  if (chunk < 0) {
    std::fprintf(stderr, "%s --init: --chunk %d: expected 0 (the default) or a number of entries\n", argv[0], chunk);
    return 2;
  }
  for (int n : sizes) {
    if (n < 1 || n > (1 << 20)) {
      std::fprintf(stderr, "%s --init: --ranks %d: expected 1..%d\n", argv[0], n, 1 << 20);
      return 2;
    }
  }
  std::printf(
      "# init of one communicator, per the code (PeerInfo %zu B, hello %zu B, reply header %zu B); "
      "first AllReduce %zu B; tcp with %d sockets per peer; table chunk %s; cards: %s\n",
      sizeof(transport::PeerInfo), core::kBootstrapHelloBytes, core::kBootstrapReplyHeaderBytes, bytes, sockets,
      chunk > 0 ? (std::to_string(chunk) + " entries").c_str()
                : "the default (N / floor(log2 N), at least 683 entries)",
      directory ? "a directory (down the tree 32-byte host records; COLLIE_PEER_CARDS=directory)" : "all");
  std::printf(
      "#   root: bytes in (hellos), out (replies: each rank's bootstrapPeers), out before (the whole table to every "
      "rank)\n"
      "#   reply: most entries (and bytes) a rank reads from the root\n"
      "#   all-gather of the table (along the root's tree, Send/Recv, the down phase in chunks): rounds (the most a "
      "rank runs), its critical path (tableGatherCost) in messages (chain) and in bytes sent one after another "
      "(path: time = path / bandwidth + chain x latency); per rank, worst of all ranks: messages sent, bytes sent, "
      "bytes received, and bytes received on average, table held (a slot of sizeof(PeerInfo) per rank, a host record's "
      "too), mean cards a rank "
      "knows after the all-gather (before any lookup)\n"
      "#   connections per rank after init (the all-gather's peers and calibration's, the tuner's broadcast, less "
      "the all-gather's links init closes: gatherOnlyPeers), after a first AllReduce too (peers), descriptors then "
      "(tcp sockets + listener, epoll, eventfd), worst of ranks 0, 1, N/2, N-1;\n"
      "#   eager (before): N-1 peers and their descriptors\n");
  std::printf("%8s | %9s %9s %10s | %5s %9s | %6s %5s %9s %5s %9s %9s %9s %9s %7s | %-5s %-5s %4s %5s %6s | %8s %8s\n",
              "ranks", "root_in", "root_out", "before", "entry", "reply", "rounds", "chain", "path", "msgs", "sent",
              "recvd", "mean_rx", "held", "cards", "bcast", "AR", "init", "peers", "fds", "eager_pe", "eager_fd");
  for (int n : sizes) collie::sim::project(n, bytes, sockets, chunk, directory);
  return 0;
}

}  // namespace collie::sim
