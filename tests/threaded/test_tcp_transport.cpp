// What only the TCP transport does, with 2-4 ranks as threads: striping across several sockets per peer (sizes
// around the threshold), IPv6 and the default interface, TCP_NODELAY, and socket counts that must agree. What
// every transport does (ordering, strangers, timeouts, failures, stashed hellos) is in
// tests/conformance/test_transport_conformance.cpp.
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

#include "base/errors.hpp"
#include "base/poller.hpp"
#include "base/socket.hpp"
#include "common/transport_harness.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace collie::transport {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using collie::testing::drive;
using collie::testing::runRanks;

using Rank = collie::testing::TransportRank;

/// n TCP ranks. host: where they listen; empty: base::defaultLocalAddress().
struct Cluster : collie::testing::Cluster {
  explicit Cluster(int n, TcpOptions options = {}, std::chrono::milliseconds timeout = 20s,
                   const std::string& host = "127.0.0.1:0")
      : collie::testing::Cluster(n, factory(options, host), timeout) {}

  static Factory factory(TcpOptions options, const std::string& host) {
    if (!host.empty()) options.bindAddr = base::parseAddress(host);
    return [options] { return std::unique_ptr<Transport>(new TcpTransport(options)); };
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
  // 1 MiB - 1 and 1 MiB: either side of the 2-rank default (unstriped on a direction's socket, then striped); 256 KiB
  // - 1 and 256 KiB: either side of the parameter's default (more ranks). With 2 ranks a sendmsg writes at most 256 KiB
  // (TcpTransport::sendBurstFor): 262145 is cut one byte past it, two 128 KiB fill one burst exactly and the
  // empty message behind them waits for the next.
  collie::testing::exchange(cluster, {0, 1, 4097, 3u << 20, 0, 100, 262144, 262143, 5, (1u << 20) - 1, 1u << 20, 262145,
                                      131072, 131072, 0, 7});
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcpExchange,
                         ::testing::Values(std::make_tuple(2, 0, -1),  // the params' defaults
                                           std::make_tuple(4, 0, -1), std::make_tuple(2, 1, 0),
                                           std::make_tuple(2, 2, 262144), std::make_tuple(3, 3, 1000),
                                           std::make_tuple(4, 4, 4097), std::make_tuple(4, 2, 1)));

TEST(TcpTransport, SendBurstOnlyWithTwoRanks) {
  EXPECT_EQ(TcpTransport::sendBurstFor(2), size_t{256} << 10);
  EXPECT_EQ(TcpTransport::sendBurstFor(3), SIZE_MAX);
  EXPECT_EQ(TcpTransport::sendBurstFor(4), SIZE_MAX);
}

TEST(TcpTransport, IPv6Loopback) {
  std::unique_ptr<Cluster> cluster;
  try {
    cluster = std::make_unique<Cluster>(2, TcpOptions{}, 20s, "[::1]:0");
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  EXPECT_EQ(TcpTransport::addressOf(cluster->ranks[0]->ctx.peers[1]).ss_family, AF_INET6);
  cluster->connectAll();
  collie::testing::exchange(*cluster, {0, 1, 4097, 3u << 20});
}

TEST(TcpTransport, DefaultInterface) {
  Cluster cluster(2, TcpOptions{}, 20s, "");
  cluster.connectAll();
  collie::testing::exchange(cluster, {1, 4097});
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
    EXPECT_LT(v[v.size() / 2], 20.0) << "median round trip in ms (~40 ms means Nagle's algorithm is on)";
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

// A receive from any source peeks at the two sockets message 0 may take (small or large). Each socket is a stream
// of its own, so a peer that sent a small message and then exited can show its end on the other socket first
// (once in about 80 runs of Proc/AnySource.BadUsesAreRefusedAndLeaveTheCommunicatorUsable/tcp): that end must not
// count as the pair's while the first socket may still bring the message.
TEST(TcpTransport, ProbeWaitsForAMessageSentBeforeTheOtherSocketEnded) {
  int s0[2], s1[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s0), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s1), 0);
  const int64_t noStripe = int64_t{1} << 30;
  tcp::TcpConnection receiver(/*rank=*/0, /*peer=*/1, {s0[0], s1[0]}, noStripe, nullptr);
  tcp::TcpConnection sender(/*rank=*/1, /*peer=*/0, {s0[1], s1[1]}, noStripe, nullptr);
  // Rank 0's message 0 from rank 1, if small, comes on socket 0; a large one would take rank 1's lane, socket 1.
  ASSERT_EQ(::shutdown(s1[1], SHUT_WR), 0);
  Arrival next;
  EXPECT_FALSE(receiver.probe(&next)) << "the end of socket 1 was taken for the end of the pair";
  // Posts a transfer of `buf` on `conn` and progresses it (no poller: the socket pairs are local) until complete.
  auto move = [](tcp::TcpConnection& conn, float(&buf)[2], bool send) {
    Transfer t;
    t.buf = buf;
    t.bytes = sizeof(buf);
    send ? conn.postSend(&t) : conn.postRecv(&t);
    for (int i = 0; i < 1000 && !t.complete; ++i) conn.progress();
    return t.complete;
  };
  float out[2] = {1.5f, -2.0f};
  ASSERT_TRUE(move(sender, out, /*send=*/true));
  ASSERT_EQ(::shutdown(s0[1], SHUT_WR), 0);  // the sender has gone: both sockets ended after its message
  ASSERT_TRUE(receiver.probe(&next));
  EXPECT_EQ(next.bytes, sizeof(out));
  float in[2] = {0, 0};
  ASSERT_TRUE(move(receiver, in, /*send=*/false));
  EXPECT_EQ(in[0], 1.5f);
  EXPECT_EQ(in[1], -2.0f);
  // Nothing more can come: the next probe reports the pair closed.
  EXPECT_THROW(receiver.probe(&next), Error);
}

}  // namespace
}  // namespace collie::transport
