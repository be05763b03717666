// Socket helpers: the COLLIE_SOCKET_IFNAME grammar, address parsing and printing, interface discovery, and
// listen/connect/accept plus deadline-bound I/O on loopback (IPv4, and IPv6 where the host has ::1).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/errors.hpp"
#include "base/socket.hpp"

namespace collie::base {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

base::Deadline in(std::chrono::milliseconds ms) { return SteadyClock::now() + ms; }

template <typename F>
ErrorCode codeOf(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  return ErrorCode::Success;
}

TEST(InterfaceMatches, EmptyFilterSkipsLoopbackAndDocker) {
  EXPECT_TRUE(base::interfaceMatches("", "eth0"));
  EXPECT_TRUE(base::interfaceMatches("", "ib0"));
  EXPECT_TRUE(base::interfaceMatches("", "enp3s0"));
  EXPECT_FALSE(base::interfaceMatches("", "lo"));
  EXPECT_FALSE(base::interfaceMatches("", "docker0"));
}

TEST(InterfaceMatches, PrefixList) {
  EXPECT_TRUE(base::interfaceMatches("eth", "eth0"));
  EXPECT_TRUE(base::interfaceMatches("eth", "eth12"));
  EXPECT_FALSE(base::interfaceMatches("eth", "ib0"));
  EXPECT_TRUE(base::interfaceMatches("eth,ib", "ib0"));
  EXPECT_TRUE(base::interfaceMatches("eth,ib", "eth1"));
  EXPECT_FALSE(base::interfaceMatches("eth,ib", "lo"));
  EXPECT_TRUE(base::interfaceMatches("lo", "lo"));  // loopback when asked for explicitly
  EXPECT_TRUE(base::interfaceMatches("eth,,ib,", "ib1"));
  EXPECT_FALSE(base::interfaceMatches(",", "eth0"));
}

TEST(InterfaceMatches, Exclude) {
  EXPECT_FALSE(base::interfaceMatches("^docker,lo", "docker0"));
  EXPECT_FALSE(base::interfaceMatches("^docker,lo", "lo"));
  EXPECT_TRUE(base::interfaceMatches("^docker,lo", "eth0"));
  EXPECT_FALSE(base::interfaceMatches("^eth", "eth3"));
  EXPECT_TRUE(base::interfaceMatches("^eth", "ib0"));
}

TEST(InterfaceMatches, Exact) {
  EXPECT_TRUE(base::interfaceMatches("=eth0", "eth0"));
  EXPECT_FALSE(base::interfaceMatches("=eth0", "eth01"));
  EXPECT_FALSE(base::interfaceMatches("=eth0", "eth"));
  EXPECT_TRUE(base::interfaceMatches("=eth0,ib1", "ib1"));
  EXPECT_FALSE(base::interfaceMatches("=eth0,ib1", "ib10"));
  EXPECT_FALSE(base::interfaceMatches("^=eth0", "eth0"));
  EXPECT_TRUE(base::interfaceMatches("^=eth0", "eth01"));
  EXPECT_TRUE(base::interfaceMatches("^=eth0", "ib0"));
}

TEST(Address, ParseAndPrintIPv4) {
  sockaddr_storage a = base::parseAddress("127.0.0.1:1234");
  EXPECT_EQ(a.ss_family, AF_INET);
  EXPECT_EQ(base::addressPort(a), 1234);
  EXPECT_EQ(base::addressLength(a), sizeof(sockaddr_in));
  EXPECT_EQ(base::addressToString(a), "127.0.0.1:1234");
  EXPECT_EQ(base::addressToString(base::parseAddress(base::addressToString(a))), "127.0.0.1:1234");
  base::setAddressPort(a, 80);
  EXPECT_EQ(base::addressToString(a), "127.0.0.1:80");
  EXPECT_EQ(base::addressPort(base::parseAddress("10.1.2.3")), 0);
}

TEST(Address, ParseAndPrintIPv6) {
  sockaddr_storage a = base::parseAddress("[::1]:5");
  EXPECT_EQ(a.ss_family, AF_INET6);
  EXPECT_EQ(base::addressPort(a), 5);
  EXPECT_EQ(base::addressLength(a), sizeof(sockaddr_in6));
  EXPECT_EQ(base::addressToString(a), "[::1]:5");
  EXPECT_EQ(base::addressToString(base::parseAddress(base::addressToString(a))), "[::1]:5");
  sockaddr_storage bare = base::parseAddress("fd00::2");
  EXPECT_EQ(bare.ss_family, AF_INET6);
  EXPECT_EQ(base::addressToString(bare), "[fd00::2]:0");
  EXPECT_EQ(base::addressToString(base::parseAddress("[2001:db8::1]")), "[2001:db8::1]:0");
}

TEST(Address, PacksIntoTheFewestBytesAndBack) {
  uint8_t packed[base::kPackedAddressBytes];
  const sockaddr_storage v4 = base::parseAddress("10.20.30.40:50607");
  ASSERT_EQ(base::packAddress(v4, packed), 6u);
  EXPECT_EQ(base::addressToString(base::unpackAddress(packed, 6)), "10.20.30.40:50607");

  sockaddr_storage v6 = base::parseAddress("[fe80::1:2]:65535");
  reinterpret_cast<sockaddr_in6&>(v6).sin6_scope_id = 7;  // a link-local address needs its interface
  ASSERT_EQ(base::packAddress(v6, packed), base::kPackedAddressBytes);
  const sockaddr_storage back = base::unpackAddress(packed, base::kPackedAddressBytes);
  EXPECT_EQ(base::addressToString(back), "[fe80::1:2]:65535");
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6&>(back).sin6_scope_id, 7u);

  EXPECT_EQ(base::unpackAddress(packed, 0).ss_family, AF_UNSPEC);  // no address published
  EXPECT_EQ(base::unpackAddress(packed, 7).ss_family, AF_UNSPEC);  // neither form's length
  sockaddr_storage unspec{};
  EXPECT_EQ(codeOf([&] { base::packAddress(unspec, packed); }), ErrorCode::InvalidArgument);
}

TEST(Address, ResolvesHostNames) {
  sockaddr_storage a = base::parseAddress("localhost:99");
  EXPECT_TRUE(a.ss_family == AF_INET || a.ss_family == AF_INET6);
  EXPECT_EQ(base::addressPort(a), 99);
}

TEST(Address, RejectsBadInput) {
  EXPECT_EQ(codeOf([] { base::parseAddress("127.0.0.1:99999"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([] { base::parseAddress("127.0.0.1:"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([] { base::parseAddress("127.0.0.1:x1"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([] { base::parseAddress("[::1"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([] { base::parseAddress("[::1]5"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([] { base::parseAddress(":5"); }), ErrorCode::InvalidArgument);
  std::string message;
  EXPECT_EQ(codeOf([] { base::parseAddress("no-such-host.invalid:1"); }, &message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("no-such-host.invalid"), std::string::npos) << message;
  sockaddr_storage unspec{};
  EXPECT_EQ(codeOf([&] { base::addressLength(unspec); }), ErrorCode::InvalidArgument);
}

TEST(Interfaces, FindsSomethingAndHonoursFilters) {
  auto all = base::findInterfaces("", "");
  ASSERT_FALSE(all.empty()) << "no interface at all, not even the loopback fallback";
  for (const auto& i : all) EXPECT_TRUE(i.addr.ss_family == AF_INET || i.addr.ss_family == AF_INET6);

  auto lo4 = base::findInterfaces("=lo", "AF_INET");
  ASSERT_FALSE(lo4.empty());
  EXPECT_EQ(lo4[0].name, "lo");
  EXPECT_EQ(base::addressToString(lo4[0].addr), "127.0.0.1:0");

  for (const auto& i : base::findInterfaces("", "AF_INET6")) EXPECT_EQ(i.addr.ss_family, AF_INET6) << i.name;
  for (const auto& i : base::findInterfaces("^lo", "")) EXPECT_NE(i.name, "lo");
  EXPECT_TRUE(base::findInterfaces("=no-such-interface", "").empty());
  EXPECT_EQ(codeOf([] { base::findInterfaces("", "AF_UNIX"); }), ErrorCode::InvalidArgument);

  sockaddr_storage def = base::defaultLocalAddress();
  EXPECT_EQ(base::addressPort(def), 0);
}

/// listen, connect, accept and a round trip on `host`; skipped where the address family is unavailable.
void roundTrip(const std::string& host) {
  sockaddr_storage addr = base::parseAddress(host);
  int lfd;
  try {
    lfd = base::listenOn(addr);
  } catch (const Error& e) {
    GTEST_SKIP() << "cannot listen on " << host << ": " << e.what();
  }
  ASSERT_GT(base::addressPort(addr), 0);
  int cfd = base::connectWithRetry(addr, in(5s), 10, "test server");
  sockaddr_storage peer{};
  int sfd = base::acceptUntil(lfd, in(5s), &peer);
  ASSERT_GE(sfd, 0);
  EXPECT_EQ(peer.ss_family, addr.ss_family);

  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 1);
  std::thread sender([&] { base::sendAll(cfd, big.data(), big.size(), in(10s), "test server"); });
  std::string got(big.size(), '\0');
  base::recvAll(sfd, got.data(), got.size(), in(10s), "test client");
  sender.join();
  EXPECT_TRUE(got == big);

  // Nothing to read: Timeout naming the other side.
  char c;
  std::string message;
  auto start = SteadyClock::now();
  EXPECT_EQ(codeOf([&] { base::recvAll(sfd, &c, 1, in(100ms), "the quiet one"); }, &message), ErrorCode::Timeout);
  EXPECT_LT(SteadyClock::now() - start, 2s);
  EXPECT_NE(message.find("the quiet one"), std::string::npos) << message;

  // No pending connection: acceptUntil gives up.
  EXPECT_EQ(base::acceptUntil(lfd, in(50ms), nullptr), -1);

  // The client goes away: RemoteError, on receive and (eventually) on send.
  ::close(cfd);
  EXPECT_EQ(codeOf([&] { base::recvAll(sfd, &c, 1, in(5s), "the client"); }, &message), ErrorCode::RemoteError);
  EXPECT_NE(message.find("the client"), std::string::npos) << message;
  EXPECT_EQ(codeOf([&] {
              for (int i = 0; i < 100; ++i) base::sendAll(sfd, big.data(), big.size(), in(5s), "the client");
            }),
            ErrorCode::RemoteError);
  ::close(sfd);
  ::close(lfd);
}

TEST(Sockets, LoopbackIPv4) { roundTrip("127.0.0.1:0"); }
TEST(Sockets, LoopbackIPv6) { roundTrip("[::1]:0"); }

TEST(Sockets, ConnectRetriesThenFails) {
  // A port nobody listens on: bind one, note it, close it.
  sockaddr_storage addr = base::parseAddress("127.0.0.1:0");
  ::close(base::listenOn(addr));
  std::string message;
  EXPECT_EQ(codeOf([&] { base::connectWithRetry(addr, in(10s), 3, "rank 7"); }, &message), ErrorCode::SystemError);
  EXPECT_NE(message.find("rank 7"), std::string::npos) << message;
  EXPECT_NE(message.find("3 attempts"), std::string::npos) << message;

  auto start = SteadyClock::now();
  EXPECT_EQ(codeOf([&] { base::connectWithRetry(addr, in(200ms), 0, "rank 8"); }, &message), ErrorCode::Timeout);
  auto took = SteadyClock::now() - start;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 2s);
  EXPECT_NE(message.find("rank 8"), std::string::npos) << message;
}

TEST(Sockets, ConnectSucceedsOnceTheListenerAppears) {
  sockaddr_storage addr = base::parseAddress("127.0.0.1:0");
  ::close(base::listenOn(addr));
  int lfd = -1;
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    sockaddr_storage again = addr;
    lfd = base::listenOn(again);
  });
  int fd = base::connectWithRetry(addr, in(10s), 0, "late listener");
  late.join();
  EXPECT_GE(fd, 0);
  ::close(fd);
  ::close(lfd);
}

// A stop flag ends a wait long before its deadline (a communicator's abort of an init waiting on its bootstrap root):
// the retries of a connection nobody answers, and a receive from a peer that says nothing.
TEST(Sockets, AStopFlagEndsTheWaitsWithinItsLook) {
  sockaddr_storage addr = base::parseAddress("127.0.0.1:0");
  ::close(base::listenOn(addr));
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);  // past the first backoffs: 10, 20, 40, 80, 160 ms
    stop = true;
  });
  auto start = SteadyClock::now();
  std::string message;
  EXPECT_EQ(codeOf([&] { base::connectWithRetry(addr, in(30s), 0, "the root", {}, 0, 0ms, &stop); }, &message),
            ErrorCode::InvalidUsage);
  EXPECT_LT(SteadyClock::now() - start, 2s);
  EXPECT_NE(message.find("aborted"), std::string::npos) << message;
  stopper.join();

  sockaddr_storage listening = base::parseAddress("127.0.0.1:0");
  int lfd = base::listenOn(listening);
  int fd = base::connectWithRetry(listening, in(5s), 0, "the root");
  stop = false;
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    stop = true;
  });
  start = SteadyClock::now();
  char byte = 0;
  EXPECT_EQ(codeOf([&] { base::recvAll(fd, &byte, 1, in(30s), "the root", &stop); }, &message),
            ErrorCode::InvalidUsage);
  EXPECT_LT(SteadyClock::now() - start, 2s);
  later.join();
  ::close(fd);
  ::close(lfd);
}

}  // namespace
}  // namespace collie::base
