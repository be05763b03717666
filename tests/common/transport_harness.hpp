// Helpers shared by the transport-level tests (tests/conformance/, tests/threaded/test_*_transport.cpp): ranks
// as threads, each with its own transport, Poller and CommContext built the way the communicator builds them
// (Cluster), a progress loop that sleeps in the poller only after a pass that moved nothing (so a lost wake-up
// shows as a stall), and an all-to-all exchange of patterned messages checked byte by byte. The templates need
// `conns`, `poller` and `longSleeps` on a rank and `ranks` (unique_ptrs) on a cluster.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/poller.hpp"
#include "transport/transport.hpp"

namespace collie::testing {

/// Runs fn(rank) on n threads; rethrows the first failure.
inline void runRanks(int n, const std::function<void(int)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

/// One rank of a Cluster (or of a test that makes its ranks in separate processes).
struct TransportRank {
  base::Poller poller;  // first: outlives the transport and the connections
  std::unique_ptr<transport::Transport> transport;
  transport::CommContext ctx;
  std::vector<std::unique_ptr<transport::Connection>> conns;  ///< indexed by peer rank (null for self)
  int longSleeps = 0;                                         ///< waits that ran into their (long) timeout

  /// Makes the transport and listens as rank r (all ranks on one host); returns what it published.
  template <typename Factory>
  transport::PeerInfo listenAs(int r, const Factory& make) {
    transport::PeerInfo info;
    info.rank = r;
    info.hostHash = 42;
    transport = make();
    transport->listen(info);
    return info;
  }
  /// The context of rank r among `infos`, with the test secret.
  void setContext(int r, const std::vector<transport::PeerInfo>& infos, std::chrono::milliseconds timeout) {
    ctx.rank = r;
    ctx.nranks = static_cast<int>(infos.size());
    ctx.peers = infos;
    for (int i = 0; i < 16; ++i) ctx.secret[i] = static_cast<uint8_t>(0xA0 + i);
    ctx.name = "test";
    ctx.timeout = timeout;
    ctx.poller = &poller;
  }
};

/// n ranks (threads of this process) of one transport kind, listening, with a shared secret and PeerInfo table
/// (all on one host); connectAll() links every pair.
struct Cluster {
  using Factory = std::function<std::unique_ptr<transport::Transport>()>;
  std::vector<std::unique_ptr<TransportRank>> ranks;

  explicit Cluster(int n, const Factory& make, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::vector<transport::PeerInfo> infos(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      ranks.push_back(std::make_unique<TransportRank>());
      infos[r] = ranks.back()->listenAs(r, make);
    }
    for (int r = 0; r < n; ++r) ranks[r]->setContext(r, infos, timeout);
  }

  /// Every rank connects to every other rank (and itself, which gives a self connection that is dropped).
  void connectAll() {
    runRanks(static_cast<int>(ranks.size()), [&](int r) { connectRank(r); });
  }
  void connectRank(int r) {
    int n = static_cast<int>(ranks.size());
    std::vector<int> peers;
    for (int p = 0; p < n; ++p) peers.push_back(p);
    connectTo(r, peers);
  }
  /// Rank r connects to `peers` (one connect() call); the connections land in conns[peer].
  void connectTo(int r, const std::vector<int>& peers) {
    TransportRank& rank = *ranks[r];
    auto conns = rank.transport->connect(rank.ctx, peers);
    rank.conns.resize(ranks.size());
    for (size_t i = 0; i < peers.size(); ++i)
      if (peers[i] != r) rank.conns[peers[i]] = std::move(conns[i]);
  }
};

/// Byte i of message `msg` from rank `from` to rank `to`.
inline uint8_t pattern(int from, int to, int msg, size_t i) {
  return static_cast<uint8_t>((from * 131 + to * 31 + msg * 7 + i * 13 + (i >> 12)) & 0xff);
}

/// Progresses `rank` until every transfer is complete. After a pass that moved nothing it sleeps in the poller
/// for `sleep` (long, so that a lost wake-up shows as a stall and is counted in rank.longSleeps).
template <typename RankT>
void drive(RankT& rank, const std::vector<transport::Transfer*>& transfers,
           std::chrono::seconds limit = std::chrono::seconds(60),
           std::chrono::microseconds sleep = std::chrono::seconds(2)) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + limit;
  for (;;) {
    bool done = true;
    for (transport::Transfer* t : transfers) done = done && t->complete;
    if (done) return;
    bool moved = false;
    for (auto& c : rank.conns)
      if (c) moved |= c->progress();
    if (!moved) {
      auto t0 = Clock::now();
      rank.poller.wait(sleep);
      if (Clock::now() - t0 >= sleep - std::chrono::milliseconds(50)) ++rank.longSleeps;
    }
    if (Clock::now() > deadline) throw std::runtime_error("transfers did not complete in time");
  }
}

/// Every rank sends each of `sizes` to every other rank, all posted at once, and checks what it receives.
template <typename ClusterT>
void exchange(ClusterT& cluster, const std::vector<size_t>& sizes) {
  int n = static_cast<int>(cluster.ranks.size());
  runRanks(n, [&](int r) {
    auto& rank = *cluster.ranks[r];
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<transport::Transfer> sends, recvs;
    sends.reserve(sizes.size() * n);
    recvs.reserve(sizes.size() * n);
    std::vector<transport::Transfer*> all;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      for (size_t m = 0; m < sizes.size(); ++m) {
        out.emplace_back(sizes[m]);
        for (size_t i = 0; i < sizes[m]; ++i) out.back()[i] = pattern(r, p, static_cast<int>(m), i);
        in.emplace_back(sizes[m], 0xEE);
        sends.push_back(transport::Transfer{out.back().data(), sizes[m]});
        recvs.push_back(transport::Transfer{in.back().data(), sizes[m]});
        rank.conns[p]->postRecv(&recvs.back());
        rank.conns[p]->postSend(&sends.back());
        all.push_back(&recvs.back());
        all.push_back(&sends.back());
      }
    }
    EXPECT_TRUE(rank.conns[r == 0 ? 1 : 0]->busy());
    drive(rank, all);
    size_t k = 0;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      EXPECT_FALSE(rank.conns[p]->busy());
      for (size_t m = 0; m < sizes.size(); ++m, ++k) {
        for (size_t i = 0; i < sizes[m]; ++i) {
          if (in[k][i] != pattern(p, r, static_cast<int>(m), i)) {
            ADD_FAILURE() << "rank " << r << " from " << p << " message " << m << " (" << sizes[m] << " bytes) byte "
                          << i << " wrong";
            break;
          }
        }
      }
    }
  });
}

}  // namespace collie::testing
