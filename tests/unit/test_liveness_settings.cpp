// The pieces behind dead-versus-late and the flight recorder, without ranks: the keep-alive and user timeout a
// TCP data socket gets from COLLIE_PEER_DEAD_TIMEOUT, which dials get a limit on going unanswered from it, and the
// recorder's ring (wrap-around, states, JSON, summary).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.hpp"
#include "core/flight_recorder.hpp"
#include "transport/handshake.hpp"

namespace collie {
namespace {

int intOption(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof(v);
  EXPECT_EQ(getsockopt(fd, level, name, &v, &len), 0);
  return v;
}

TEST(DeadPeerTimeout, SetsKeepAliveThatAddsUpToItAndNoUserTimeout) {
  for (int64_t ms : {1000, 2000, 20000, 3600000}) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    base::setDeadPeerTimeout(fd, ms);
    EXPECT_EQ(intOption(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    const int idle = intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE);
    const int intvl = intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL);
    const int cnt = intOption(fd, IPPROTO_TCP, TCP_KEEPCNT);
    EXPECT_GE(idle, 1);
    EXPECT_GE(intvl, 1);
    EXPECT_GE(cnt, 1);
    // A silent peer is dropped after idle + cnt * intvl seconds: within a second of the asked time.
    const int64_t total = int64_t{idle} + int64_t{cnt} * intvl;
    EXPECT_LE(total * 1000, ms + 1000) << ms;
    EXPECT_GE(total * 1000, ms - 1000) << ms;
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);  // it would end zero-window probing of a live peer
    close(fd);
  }
}

TEST(DeadPeerTimeout, ZeroLeavesTheKernelDefaults) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  base::setDeadPeerTimeout(fd, 0);
  EXPECT_EQ(intOption(fd, SOL_SOCKET, SO_KEEPALIVE), 0);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
  close(fd);
}

// A live peer that does not read: its kernel advertises a zero window and answers every window probe, so
// unansweredMs() never grows past the probe's round trip, however long the window stays shut. Under memory pressure
// (CI's sanitizer stage runs three tests at once) the peer's kernel may drop a segment it had room for: the data then
// waits for its retransmission, whose back-off (0.2, 0.4, 0.8 s...) unansweredMs() counts, as it must for a peer that
// stopped answering; COLLIE_PEER_DEAD_TIMEOUT's default (20 s) leaves room for it. So the bound holds for every sample
// taken while only probes were out, and for the others unless the kernel had retransmitted.
TEST(DeadPeerTimeout, ALivePeerThatDoesNotReadStillAnswers) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(lfd, 1), 0);
  socklen_t alen = sizeof(addr);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &alen), 0);
  int tx = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(tx, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  int rx = accept(lfd, nullptr, nullptr);
  ASSERT_GE(rx, 0);
  base::setDeadPeerTimeout(tx, 1000);
  base::setNonBlocking(tx, true);
  std::vector<char> chunk(1 << 16, 'x');
  size_t sent = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3500);
  int64_t worstProbing = -1, worstData = -1;
  uint32_t retransmits = 0;
  while (std::chrono::steady_clock::now() < until) {
    ssize_t n = send(tx, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n > 0) sent += static_cast<size_t>(n);
    ASSERT_TRUE(n > 0 || errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
    const int64_t silent = base::unansweredMs(tx);
    tcp_info info{};
    socklen_t len = sizeof(info);
    ASSERT_EQ(getsockopt(tx, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
    retransmits = info.tcpi_total_retrans;
    int64_t& worst = info.tcpi_unacked == 0 ? worstProbing : worstData;
    worst = std::max(worst, silent);
    std::this_thread::sleep_for(std::chrono::milliseconds(n > 0 ? 0 : 20));
  }
  EXPECT_LT(worstProbing, 1000) << "a live peer answering window probes looked dead after " << sent << " bytes";
  if (retransmits == 0) {
    EXPECT_LT(worstData, 1000) << "data unacknowledged with nothing retransmitted";
  }
  EXPECT_GT(sent, size_t{0});
  char c = 0;
  EXPECT_EQ(recv(rx, &c, 1, 0), 1);  // the connection is fine: nothing was dropped
  EXPECT_EQ(c, 'x');
  close(tx);
  close(rx);
  close(lfd);
}

core::OpDesc op(algorithms::Collective coll, size_t count, int root = 0) {
  return core::makeOp(coll, nullptr, nullptr, count, DataType::Float32, ReduceOp::Max, root);
}

TEST(UnansweredDial, LoopbackAddressesAreTold) {
  for (const char* a : {"127.0.0.1:1", "127.4.5.6:1", "[::1]:1", "[::ffff:127.0.0.1]:1"})
    EXPECT_TRUE(base::isLoopbackAddress(base::parseAddress(a))) << a;
  for (const char* a : {"10.213.0.2:1", "128.0.0.1:1", "[::2]:1", "[::ffff:10.0.0.1]:1", "[fe80::1]:1"})
    EXPECT_FALSE(base::isLoopbackAddress(base::parseAddress(a))) << a;
}

TEST(UnansweredDial, OnlyAPeerOnAnotherHostOffLoopbackGetsTheDeadPeerLimit) {
  transport::CommContext ctx;
  ctx.rank = 0;
  ctx.nranks = 4;
  ctx.peers.resize(4);
  for (auto& p : ctx.peers) p.hostHash = 7, p.netNs = 9;
  ctx.peers[2].hostHash = 8;  // another machine
  ctx.peers[3].netNs = 10;    // another network namespace of this machine: another host (the test bed's)
  const sockaddr_storage remote = base::parseAddress("10.213.0.3:5000");
  const sockaddr_storage loop = base::parseAddress("127.0.0.1:5000");
  using std::chrono::milliseconds;
  EXPECT_EQ(transport::handshake::unansweredLimit(ctx, 1, remote, 20000), milliseconds(0));  // this host
  EXPECT_EQ(transport::handshake::unansweredLimit(ctx, 2, remote, 20000), milliseconds(20000));
  EXPECT_EQ(transport::handshake::unansweredLimit(ctx, 3, remote, 2000), milliseconds(2000));
  EXPECT_EQ(transport::handshake::unansweredLimit(ctx, 2, loop, 20000), milliseconds(0));  // fake hosts, one machine
  EXPECT_EQ(transport::handshake::unansweredLimit(ctx, 2, remote, 0), milliseconds(0));    // kernel's defaults asked
}

TEST(FlightRecorderRing, KeepsTheLastEntriesWithTheirStates) {
  core::FlightRecorder rec(1, 4, "ring-test", 4);
  rec.setTransportNames({"shm", "tcp"});
  for (int i = 0; i < 6; ++i) {
    rec.begin(op(algorithms::Collective::AllReduce, 100 + i), algorithms::Algorithm::Ring, 1u, (100 + i) * 4);
    rec.finish(true);
  }
  rec.begin(op(algorithms::Collective::Broadcast, 7, 3), algorithms::Algorithm::Tree, 3u, 28);
  EXPECT_EQ(rec.calls(), 7u);
  const std::string json = rec.toJson("test");
  // Entries 0..2 fell out of the 4-entry ring; 3..5 are done, 6 runs.
  EXPECT_EQ(json.find("\"seq\": 2,"), std::string::npos) << json;
  for (int s = 3; s <= 6; ++s) EXPECT_NE(json.find("\"seq\": " + std::to_string(s) + ","), std::string::npos) << json;
  EXPECT_NE(json.find("\"seq\": 5, \"coll\": \"AllReduce\", \"dtype\": \"float32\", \"op\": \"max\", \"count\": 105, "
                      "\"bytes\": 420, \"root\": 0, \"algo\": \"ring\", \"transport\": \"shm\", \"state\": \"done\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"seq\": 6, \"coll\": \"Broadcast\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"root\": 3, \"algo\": \"tree\", \"transport\": \"shm+tcp\", \"state\": \"running\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"rank\": 1, \"nranks\": 4"), std::string::npos) << json;
  const std::string summary = rec.summary();
  EXPECT_NE(summary.find("in flight: #6 Broadcast"), std::string::npos) << summary;
  EXPECT_NE(summary.find("last done: #5 AllReduce"), std::string::npos) << summary;
  rec.finish(false);
  EXPECT_NE(rec.toJson("x").find("\"seq\": 6, \"coll\": \"Broadcast\""), std::string::npos);
  EXPECT_NE(rec.toJson("x").find("\"state\": \"failed\""), std::string::npos);
  // No COLLIE_FLIGHT_RECORDER in this process: nothing is written.
  EXPECT_EQ(rec.dump("x"), "");
}

TEST(FlightRecorderRing, QueuedCallsFollowWithTheirFutureNumbers) {
  core::FlightRecorder rec(0, 2, "queued-test", 8);
  rec.begin(op(algorithms::Collective::AllReduce, 10), algorithms::Algorithm::Ring, 1u, 40);
  rec.setQueuedSource([] {
    return std::vector<core::OpDesc>{op(algorithms::Collective::AllGather, 3),
                                     op(algorithms::Collective::Reduce, 5, 1)};
  });
  const std::string json = rec.toJson("q");
  EXPECT_NE(json.find("\"seq\": 0, \"coll\": \"AllReduce\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"seq\": 1, \"coll\": \"AllGather\", \"dtype\": \"float32\", \"op\": \"max\", \"count\": 3, "
                      "\"bytes\": 12, \"root\": 0, \"state\": \"queued\"}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"seq\": 2, \"coll\": \"Reduce\""), std::string::npos) << json;
  rec.setQueuedSource({});
  EXPECT_EQ(rec.toJson("q").find("\"state\": \"queued\""), std::string::npos);
}

TEST(FlightRecorderRing, ZeroEntriesRecordsNothingButCountsTheCall) {
  core::FlightRecorder rec(0, 2, "off", 0);
  rec.begin(op(algorithms::Collective::AllReduce, 1), algorithms::Algorithm::Ring, 0, 4);
  rec.finish(true);
  EXPECT_EQ(rec.calls(), 1u);  // counted for the statistics, which read it
  const std::string json = rec.toJson("off");
  EXPECT_EQ(json.find("\"seq\""), std::string::npos) << json;  // and no entry kept
}

}  // namespace
}  // namespace collie
