// The TCP transport with 2-4 ranks as threads on 127.0.0.1: handshake (including strangers and missing
// peers), data in both directions across the striping threshold, ordering, size checks and peer failure.
// Each rank has its own Poller and CommContext, built by hand the way the communicator builds them.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/transport_harness.hpp"
#include "base/errors.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace collie::transport {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using collie::testing::drive;
using collie::testing::exchange;
using collie::testing::pattern;
using collie::testing::runRanks;

struct Rank {
  std::unique_ptr<TcpTransport> transport;
  base::Poller poller;
  CommContext ctx;
  std::vector<std::unique_ptr<Connection>> conns;  // indexed by peer rank (null for self)
  int longSleeps = 0;                              // waits that ran into their (long) timeout
};

/// n ranks listening on 127.0.0.1 with a shared secret.
struct Cluster {
  std::vector<std::unique_ptr<Rank>> ranks;

  /// host: where the ranks listen; empty: base::defaultLocalAddress().
  explicit Cluster(int n, TcpOptions options = {}, std::chrono::milliseconds timeout = 20s,
                   const std::string& host = "127.0.0.1:0") {
    if (!host.empty()) options.bindAddr = base::parseAddress(host);
    std::vector<PeerInfo> infos(n);
    for (int r = 0; r < n; ++r) {
      auto rank = std::make_unique<Rank>();
      rank->transport = std::make_unique<TcpTransport>(options);
      infos[r].rank = r;
      rank->transport->listen(infos[r]);
      ranks.push_back(std::move(rank));
    }
    for (int r = 0; r < n; ++r) {
      CommContext& ctx = ranks[r]->ctx;
      ctx.rank = r;
      ctx.nranks = n;
      ctx.peers = infos;
      for (int i = 0; i < 16; ++i) ctx.secret[i] = static_cast<uint8_t>(0xA0 + i);
      ctx.name = "test";
      ctx.timeout = timeout;
      ctx.poller = &ranks[r]->poller;
    }
  }

  /// Every rank connects to every other rank.
  void connectAll() {
    int n = static_cast<int>(ranks.size());
    runRanks(n, [&](int r) { connectRank(r); });
  }
  void connectRank(int r) {
    int n = static_cast<int>(ranks.size());
    std::vector<int> peers;
    for (int p = 0; p < n; ++p)
      if (p != r) peers.push_back(p);
    auto conns = ranks[r]->transport->connect(ranks[r]->ctx, peers);
    ranks[r]->conns.resize(n);
    for (size_t i = 0; i < peers.size(); ++i) ranks[r]->conns[peers[i]] = std::move(conns[i]);
  }
};

// (nranks, sockets per peer, stripe threshold)
class TcpExchange : public ::testing::TestWithParam<std::tuple<int, int, int64_t>> {};

TEST_P(TcpExchange, SizesAcrossTheStripeThreshold) {
  auto [n, nsock, stripe] = GetParam();
  TcpOptions options;
  options.socketsPerPeer = nsock;
  options.stripeMinBytes = stripe;
  Cluster cluster(n, options);
  cluster.connectAll();
  exchange(cluster, {0, 1, 4097, 3u << 20, 0, 100, 262144, 262143, 5});
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcpExchange,
                         ::testing::Values(std::make_tuple(2, 0, -1),  // the params' defaults
                                           std::make_tuple(2, 1, 0), std::make_tuple(2, 2, 262144),
                                           std::make_tuple(3, 3, 1000), std::make_tuple(4, 4, 4097),
                                           std::make_tuple(4, 2, 1)));

TEST(TcpTransport, IPv6Loopback) {
  std::unique_ptr<Cluster> cluster;
  try {
    cluster = std::make_unique<Cluster>(2, TcpOptions{}, 20s, "[::1]:0");
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  EXPECT_EQ(cluster->ranks[0]->ctx.peers[1].tcpAddr.ss_family, AF_INET6);
  cluster->connectAll();
  exchange(*cluster, {0, 1, 4097, 3u << 20});
}

TEST(TcpTransport, DefaultInterface) {
  Cluster cluster(2, TcpOptions{}, 20s, "");
  cluster.connectAll();
  exchange(cluster, {1, 4097});
}

TEST(TcpTransport, ManySmallMessagesInOrder) {
  TcpOptions options;
  options.socketsPerPeer = 3;
  Cluster cluster(2, options);
  cluster.connectAll();
  constexpr int kCount = 20000;
  runRanks(2, [&](int r) {
    Rank& rank = *cluster.ranks[r];
    Connection& conn = *rank.conns[1 - r];
    if (r == 0) {
      // All posted at once.
      std::vector<std::vector<uint8_t>> bufs(kCount);
      std::vector<Transfer> ts(kCount);
      std::vector<Transfer*> all;
      for (int m = 0; m < kCount; ++m) {
        bufs[m].assign(m % 37, static_cast<uint8_t>(m));
        ts[m] = Transfer{bufs[m].data(), bufs[m].size()};
        conn.postSend(&ts[m]);
        all.push_back(&ts[m]);
      }
      drive(rank, all);
    } else {
      // Posted one at a time, so data often waits in the socket before its receive exists.
      std::vector<uint8_t> buf(64);
      for (int m = 0; m < kCount; ++m) {
        Transfer t{buf.data(), static_cast<size_t>(m % 37)};
        conn.postRecv(&t);
        drive(rank, {&t});
        for (int i = 0; i < m % 37; ++i) {
          if (buf[i] != static_cast<uint8_t>(m)) {
            ADD_FAILURE() << "message " << m << " byte " << i;
            return;
          }
        }
      }
    }
  });
}

// Every socket needs TCP_NODELAY: with Nagle's algorithm on, a small message sent right behind a larger one
// waits for the peer's delayed ACK (~40 ms on Linux). One socket per peer, so both messages share it; both
// ranks take the sender's part in turn (one accepted the socket, the other connected it).
TEST(TcpTransport, SmallMessageBehindALargerOneIsNotDelayed) {
  TcpOptions options;
  options.socketsPerPeer = 1;
  Cluster cluster(2, options);
  cluster.connectAll();
  std::vector<double> ms[2];
  runRanks(2, [&](int r) {
    Rank& rank = *cluster.ranks[r];
    Connection& conn = *rank.conns[1 - r];
    std::vector<uint8_t> medium(4000), one(1);
    for (int i = 0; i < 20; ++i) {
      bool sender = (i % 2) == r;
      auto t0 = SteadyClock::now();
      Transfer a{medium.data(), medium.size()}, b{one.data(), one.size()}, reply{one.data(), one.size()};
      if (sender) {
        conn.postSend(&a);
        conn.postSend(&b);
        conn.postRecv(&reply);
        drive(rank, {&a, &b, &reply});
        ms[r].push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
      } else {
        conn.postRecv(&a);
        conn.postRecv(&b);
        drive(rank, {&a, &b});
        conn.postSend(&reply);
        drive(rank, {&reply});
      }
    }
  });
  for (auto& v : ms) {
    std::sort(v.begin(), v.end());
    EXPECT_LT(v[v.size() / 2], 10.0) << "median round trip in ms (~40 ms means Nagle's algorithm is on)";
  }
}

TEST(TcpTransport, StrangersAreRefusedAndConnectSucceeds) {
  Cluster cluster(3);
  const sockaddr_storage target = cluster.ranks[0]->ctx.peers[0].tcpAddr;
  // Three strangers wait in rank 0's backlog: one with a wrong hello, one that says nothing, one that hangs up.
  int wrong = base::connectWithRetry(target, SteadyClock::now() + 5s, 10, "rank 0");
  std::vector<uint8_t> junk(48, 0x41);
  base::sendAll(wrong, junk.data(), junk.size(), SteadyClock::now() + 5s, "rank 0");
  int silent = base::connectWithRetry(target, SteadyClock::now() + 5s, 10, "rank 0");
  int quitter = base::connectWithRetry(target, SteadyClock::now() + 5s, 10, "rank 0");
  base::sendAll(quitter, junk.data(), 10, SteadyClock::now() + 5s, "rank 0");
  ::close(quitter);

  ::testing::internal::CaptureStderr();
  cluster.connectAll();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("wrong magic or secret"), std::string::npos) << log;
  EXPECT_NE(log.find("127.0.0.1:"), std::string::npos) << log;

  // The refused one was closed by rank 0.
  char c;
  EXPECT_EQ(::recv(wrong, &c, 1, 0), 0);
  ::close(wrong);
  ::close(silent);
  exchange(cluster, {1, 4097});
}

TEST(TcpTransport, WrongSecretFromARealPeerFailsThatPeer) {
  Cluster cluster(2, {}, 1s);
  cluster.ranks[1]->ctx.secret[3] ^= 1;
  std::string messages[2];
  ErrorCode codes[2] = {ErrorCode::Success, ErrorCode::Success};
  runRanks(2, [&](int r) {
    try {
      cluster.connectRank(r);
    } catch (const Error& e) {
      codes[r] = e.code();
      messages[r] = e.what();
    }
  });
  EXPECT_EQ(codes[0], ErrorCode::Timeout) << messages[0];
  EXPECT_NE(messages[0].find("rank(s) 1"), std::string::npos) << messages[0];
  EXPECT_NE(codes[1], ErrorCode::Success);
}

TEST(TcpTransport, PeerCloseGivesRemoteError) {
  Cluster cluster(2);
  cluster.connectAll();
  Rank& r0 = *cluster.ranks[0];
  std::vector<uint8_t> buf(100);
  Transfer recv{buf.data(), buf.size()};
  r0.conns[1]->postRecv(&recv);
  EXPECT_FALSE(r0.conns[1]->progress());
  cluster.ranks[1]->conns[0]->close();
  cluster.ranks[1]->conns[0]->close();  // idempotent
  try {
    drive(r0, {&recv}, 10s);
    FAIL() << "expected a RemoteError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::RemoteError);
    EXPECT_NE(std::string(e.what()).find("peer 1 closed the connection"), std::string::npos) << e.what();
  }
  // The failure sticks.
  EXPECT_THROW(r0.conns[1]->progress(), Error);

  // Sending into a closed peer fails too (and raises no SIGPIPE).
  Cluster again(2);
  again.connectAll();
  again.ranks[0]->conns[1]->close();
  std::vector<uint8_t> big(16 << 20);
  Transfer send{big.data(), big.size()};
  again.ranks[1]->conns[0]->postSend(&send);
  try {
    drive(*again.ranks[1], {&send}, 10s);
    FAIL() << "expected a RemoteError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::RemoteError);
    EXPECT_NE(std::string(e.what()).find("peer 0"), std::string::npos) << e.what();
  }
}

TEST(TcpTransport, SizeMismatchIsReported) {
  Cluster cluster(2);
  cluster.connectAll();
  std::vector<uint8_t> a(100), b(200);
  Transfer send{a.data(), a.size()}, recv{b.data(), b.size()};
  cluster.ranks[0]->conns[1]->postSend(&send);
  cluster.ranks[1]->conns[0]->postRecv(&recv);
  drive(*cluster.ranks[0], {&send});
  try {
    drive(*cluster.ranks[1], {&recv}, 10s);
    FAIL() << "expected a size mismatch";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InternalError);
    EXPECT_NE(std::string(e.what()).find("message size mismatch from peer 0: expected 200 got 100"), std::string::npos)
        << e.what();
  }
}

TEST(TcpTransport, MissingPeersTimeOut) {
  // Rank 0 waits for ranks 1 and 2 to connect; neither does.
  {
    Cluster cluster(3, {}, 300ms);
    auto start = SteadyClock::now();
    try {
      cluster.ranks[0]->transport->connect(cluster.ranks[0]->ctx, {1, 2});
      FAIL() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Timeout);
      EXPECT_NE(std::string(e.what()).find("rank(s) 1, 2"), std::string::npos) << e.what();
    }
    auto took = SteadyClock::now() - start;
    EXPECT_GE(took, 290ms);
    EXPECT_LT(took, 2s);
  }
  // Rank 1 connects to rank 0's listener (the kernel accepts) but rank 0 never answers.
  {
    Cluster cluster(2, {}, 300ms);
    auto start = SteadyClock::now();
    try {
      cluster.ranks[1]->transport->connect(cluster.ranks[1]->ctx, {0});
      FAIL() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Timeout);
      EXPECT_NE(std::string(e.what()).find("rank(s) 0"), std::string::npos) << e.what();
    }
    EXPECT_LT(SteadyClock::now() - start, 2s);
  }
}

TEST(TcpTransport, MismatchedSocketCountsFail) {
  Cluster cluster(2);
  TcpOptions three;
  three.socketsPerPeer = 3;
  three.bindAddr = base::parseAddress("127.0.0.1:0");
  cluster.ranks[1]->transport = std::make_unique<TcpTransport>(three);
  PeerInfo info;
  info.rank = 1;
  cluster.ranks[1]->transport->listen(info);
  for (auto& r : cluster.ranks) {
    r->ctx.peers[1] = info;
    r->ctx.timeout = 2s;
  }
  ErrorCode codes[2] = {ErrorCode::Success, ErrorCode::Success};
  runRanks(2, [&](int r) {
    try {
      cluster.connectRank(r);
    } catch (const Error& e) {
      codes[r] = e.code();
    }
  });
  EXPECT_EQ(codes[0], ErrorCode::InvalidUsage);
  EXPECT_NE(codes[1], ErrorCode::Success);
}

TEST(TcpTransport, DISABLED_Bandwidth) {
  Cluster cluster(2);
  cluster.connectAll();
  for (size_t bytes : {size_t{4096}, size_t{1} << 20, size_t{64} << 20}) {
    int iters = bytes >= (size_t{64} << 20) ? 20 : bytes >= (size_t{1} << 20) ? 500 : 20000;
    std::vector<uint8_t> buf(bytes, 1), dst(bytes);
    auto start = SteadyClock::now();
    runRanks(2, [&](int r) {
      Rank& rank = *cluster.ranks[r];
      for (int i = 0; i < iters; ++i) {
        Transfer t{r == 0 ? buf.data() : dst.data(), bytes};
        if (r == 0)
          rank.conns[1]->postSend(&t);
        else
          rank.conns[0]->postRecv(&t);
        drive(rank, {&t});
      }
    });
    double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
    printf("%10zu bytes: %8.2f us/msg  %8.3f GB/s\n", bytes, secs / iters * 1e6, bytes * iters / secs / 1e9);
  }
}

}  // namespace
}  // namespace collie::transport
