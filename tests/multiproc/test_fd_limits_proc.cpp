// Running out of file descriptors during connection set-up (the shortage a small `ulimit -n` gives a large job).
// Each case runs in a forked child with a low RLIMIT_NOFILE, so that this test process keeps its own:
//   - a shortage that passes (another thread frees descriptors 300 ms in) is survived: the ranks connect and
//     exchange data, checked byte by byte;
//   - a shortage that lasts fails within seconds with "out of file descriptors: N open, limit M; raise ulimit -n
//     (or lower COLLIE_SOCKETS_PER_PEER)" on the rank that hit it, never a hang, never a closed connection or a
//     malformed message blamed on a peer;
//   - a hello whose descriptors cannot be received (shm) fails the rank it was for at once, naming the shortage;
//   - the same for a whole communicator's init (bootstrap, shm and tcp set-up) under a limit too small for it.
// The child reports through a pipe; the parent (single-threaded, as every multiproc test's) waits with a deadline.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <collie/collie.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/errors.hpp"
#include "base/fd_limits.hpp"
#include "base/socket.hpp"
#include "common/transport_harness.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr rlim_t kLimit = 256;

struct ChildResult {
  bool finished = false;  ///< exited on its own before the deadline
  int exitCode = -1;
  std::string report;  ///< what it wrote
  double seconds = 0;
};

/// Appends what `fd` gives to `out` until its writers close it (true) or `stop` passes (false).
bool readUntilClosed(int fd, Clock::time_point stop, std::string& out) {
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(stop - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return n == 0;
    out.append(buf, static_cast<size_t>(n));
  }
}

/// Runs body(report) in a forked child under RLIMIT_NOFILE = limit; exit code 0 when body returns true.
ChildResult runInChild(rlim_t limit, const std::function<bool(std::string&)>& body, std::chrono::seconds deadline) {
  int pipeFds[2];
  EXPECT_EQ(pipe2(pipeFds, O_CLOEXEC), 0);
  fflush(stdout);
  fflush(stderr);
  auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    ::close(pipeFds[0]);
    rlimit lim{limit, limit};
    std::string report;
    bool ok = false;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
      report = std::string("setrlimit failed: ") + std::strerror(errno);
    } else {
      try {
        ok = body(report);
      } catch (const std::exception& e) {
        report += std::string("uncaught: ") + e.what();
      }
    }
    ssize_t w = ::write(pipeFds[1], report.data(), report.size());
    (void)w;
    _exit(ok ? 0 : 1);
  }
  ::close(pipeFds[1]);
  ChildResult result;
  readUntilClosed(pipeFds[0], t0 + deadline, result.report);
  ::close(pipeFds[0]);
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) == 0) {
    // A child that closed its pipe may still be exiting: give it a moment before calling it hung.
    auto stop = t0 + deadline;
    while (Clock::now() < stop && waitpid(pid, &status, WNOHANG) == 0) std::this_thread::sleep_for(10ms);
    if (Clock::now() >= stop) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      return result;
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.finished = WIFEXITED(status);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// Takes every free descriptor (dups of /dev/null); returns them.
std::vector<int> takeAllDescriptors() {
  std::vector<int> taken;
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0) return taken;
  taken.push_back(null);
  for (int fd; (fd = ::dup(null)) >= 0;) taken.push_back(fd);
  return taken;
}

std::unique_ptr<transport::Transport> tcpTransport() {
  transport::TcpOptions o;
  o.bindAddr = base::parseAddress("127.0.0.1:0");
  o.socketsPerPeer = 4;
  return std::make_unique<transport::TcpTransport>(o);
}

/// Connects a tcp cluster of `n` ranks while every descriptor is taken; frees them after `freeAfter` (never when
/// negative). Each rank's error (or "ok") goes into `errors`.
void connectStarved(int n, std::chrono::milliseconds freeAfter, std::vector<std::string>& errors) {
  testing::Cluster cluster(n, tcpTransport, 4s);
  std::vector<int> taken = takeAllDescriptors();
  std::thread freer;
  if (freeAfter.count() >= 0) {
    freer = std::thread([&] {
      std::this_thread::sleep_for(freeAfter);
      for (int fd : taken) ::close(fd);
    });
  }
  errors.assign(static_cast<size_t>(n), "ok");
  testing::runRanks(n, [&](int r) {
    try {
      cluster.connectRank(r);
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  if (freer.joinable()) freer.join();
  if (freeAfter.count() < 0) {
    for (int fd : taken) ::close(fd);
    return;
  }
  bool allOk = true;
  for (const std::string& e : errors) allOk = allOk && e == "ok";
  if (allOk) testing::exchange(cluster, {1, 4097, 1u << 20});
}

/// Rank 0 answers dials from now on (Transport::serve: the process's accept loop takes them); then every descriptor is
/// taken but the few rank 1's sockets need, rank 1 dials and rank 0 waits for it, so that the accept loop's accept()
/// meets the shortage. Frees them all after `freeAfter`. Rank 1 may meet the shortage too (the accept loop can take a
/// descriptor freed for it): it waits for descriptors as accept() does, so both get through once they are freed.
void acceptStarved(std::chrono::milliseconds freeAfter, std::vector<std::string>& errors) {
  testing::Cluster cluster(2, tcpTransport, 4s);
  errors.assign(2, "ok");
  cluster.ranks[0]->transport->serve(cluster.ranks[0]->ctx);
  const int sockets = static_cast<transport::TcpTransport&>(*cluster.ranks[1]->transport).socketsPerPeer();
  std::vector<int> taken = takeAllDescriptors();
  for (int i = 0; i < sockets && !taken.empty(); ++i) {  // rank 1's own sockets
    ::close(taken.back());
    taken.pop_back();
  }
  std::thread dialer([&] {
    try {
      cluster.connectRank(1);
    } catch (const Error& e) {
      errors[1] = e.what();
    }
  });
  std::thread freer([&] {
    std::this_thread::sleep_for(freeAfter);
    for (int fd : taken) ::close(fd);
  });
  try {
    cluster.connectRank(0);
  } catch (const Error& e) {
    errors[0] = e.what();
  }
  freer.join();
  dialer.join();
  if (errors[0] == "ok" && errors[1] == "ok") testing::exchange(cluster, {1, 4097, 1u << 20});
}

/// Rank 0 connects here with every descriptor of this process taken but `spare`, while rank 1 dials it from a forked
/// process (it has descriptors to spare); the shortage lasts until rank 1 has reported. Rank 1 is forked before any
/// transport exists in this process: a listener starts the process's accept loop, and a child forked beside that
/// thread may inherit a lock it held (the sanitizers' allocator's) and hang. Rank 1 makes its own transport once the
/// pipe brings it rank 0's PeerInfo, which this process sends once rank 0 serves and is starved; rank 0 needs no
/// address of rank 1 (it is dialled), only its pid (a dead dialler is then noticed). errors[0]: rank 0's error
/// (prefixed with its code's name when `withCode`), errors[1]: rank 1's; "ok" when none.
void dialFromAForkedProcess(const testing::Cluster::Factory& make, std::chrono::milliseconds timeout, int spare,
                            bool withCode, std::vector<std::string>& errors) {
  errors.assign(2, "ok");
  int reportFds[2], goFds[2];
  if (pipe2(reportFds, O_CLOEXEC) != 0 || pipe2(goFds, O_CLOEXEC) != 0) {
    errors[1] = std::string("pipe failed: ") + std::strerror(errno);
    return;
  }
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {  // rank 1: waits for rank 0's PeerInfo, dials, reports its error
    ::close(reportFds[0]);
    ::close(goFds[1]);
    transport::PeerInfo first;
    std::string error = "ok";
    if (::read(goFds[0], &first, sizeof(first)) != static_cast<ssize_t>(sizeof(first))) {
      error = "rank 0 never served";
    } else {
      try {
        testing::TransportRank rank;
        const transport::PeerInfo self = rank.listenAs(1, make);
        rank.setContext(1, {first, self}, timeout);
        rank.transport->connect(rank.ctx, {0, 1});
      } catch (const Error& e) {
        error = e.what();
      }
    }
    ssize_t w = ::write(reportFds[1], error.data(), error.size());
    (void)w;
    _exit(0);
  }
  ::close(reportFds[1]);
  ::close(goFds[0]);
  if (pid < 0) {
    errors[1] = std::string("fork failed: ") + std::strerror(errno);
    ::close(reportFds[0]);
    ::close(goFds[1]);
    return;
  }
  testing::TransportRank rank;
  transport::PeerInfo second;  // rank 1 as rank 0 needs to know it: its host and pid
  second.rank = 1;
  second.hostHash = 42;
  second.pid = pid;
  rank.setContext(0, {rank.listenAs(0, make), second}, timeout);
  rank.transport->serve(rank.ctx);
  std::vector<int> taken = takeAllDescriptors();
  for (int i = 0; i < spare && !taken.empty(); ++i) {
    ::close(taken.back());
    taken.pop_back();
  }
  if (::write(goFds[1], &rank.ctx.peers[0], sizeof(transport::PeerInfo)) !=
      static_cast<ssize_t>(sizeof(transport::PeerInfo)))
    errors[1] = "could not start rank 1";
  try {
    rank.transport->connect(rank.ctx, {0, 1});
  } catch (const Error& e) {
    errors[0] = (withCode ? std::string(base::errorCodeName(e.code())) + ": " : std::string()) + e.what();
  }
  // Rank 1 times out within its timeout; a child that has not reported well after that is hung.
  std::string report;
  if (!readUntilClosed(reportFds[0], Clock::now() + 30s, report)) {
    ::kill(pid, SIGKILL);
    report = "rank 1 hung (killed after 30 s); it had reported: " + report;
  }
  waitpid(pid, nullptr, 0);
  errors[1] = report;
  for (int fd : taken) ::close(fd);
  ::close(reportFds[0]);
  ::close(goFds[1]);
}

/// As acceptStarved, with a shortage that lasts, and rank 1 dialling from a forked process: in one process the accept
/// loop may take a descriptor freed for rank 1, which then fails first naming the shortage, and rank 0's accept()
/// meets none (it times out waiting for rank 1): here accept() always meets it, until rank 1 has timed out waiting
/// for an answer (its 4 s).
void acceptStarvedForGood(std::vector<std::string>& errors) {
  dialFromAForkedProcess(tcpTransport, 4s, 0, false, errors);
}

/// Rank 0 (shm) waits for rank 1's dial with one descriptor free: enough for accept(), not for the three its hello
/// carries (ring, control line, wake), which the kernel then drops.
void helloDescriptorsStarved(std::vector<std::string>& errors) {
  dialFromAForkedProcess([] { return std::make_unique<transport::ShmTransport>(); }, 4s, 1, true, errors);
}

TEST(FdLimits, AcceptSurvivesAShortageThatPasses) {
  ChildResult child = runInChild(
      kLimit,
      [](std::string& report) {
        std::vector<std::string> errors;
        acceptStarved(300ms, errors);
        report = "rank 0: " + errors[0] + "\nrank 1: " + errors[1] + "\n";
        return !::testing::Test::HasFailure() && errors[0] == "ok" && errors[1] == "ok";
      },
      60s);
  ASSERT_TRUE(child.finished) << "the child hung\n" << child.report;
  EXPECT_EQ(child.exitCode, 0) << child.report;
}

TEST(FdLimits, AcceptNamesAShortageThatLasts) {
  ChildResult child = runInChild(
      kLimit,
      [](std::string& report) {
        std::vector<std::string> errors;
        acceptStarvedForGood(errors);
        report = "rank 0: " + errors[0] + "\nrank 1: " + errors[1] + "\n";
        return true;
      },
      60s);
  ASSERT_TRUE(child.finished) << "the child hung\n" << child.report;
  EXPECT_NE(child.report.find("rank 0: accept failed: out of file descriptors: "), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("limit " + std::to_string(kLimit) + "; raise ulimit -n"), std::string::npos)
      << child.report;
  // Rank 1 got its sockets and waited for an answer that never came.
  EXPECT_NE(child.report.find("rank 1: tcp connect of rank 1 in test: timed out"), std::string::npos) << child.report;
  EXPECT_LT(child.seconds, 20.0);
}

TEST(FdLimits, AShortageThatPassesIsSurvivedByAcceptAndConnect) {
  ChildResult child = runInChild(
      kLimit,
      [](std::string& report) {
        std::vector<std::string> errors;
        auto t0 = Clock::now();
        connectStarved(3, 300ms, errors);
        double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        bool ok = !::testing::Test::HasFailure() && seconds >= 0.25;
        for (size_t r = 0; r < errors.size(); ++r) {
          ok = ok && errors[r] == "ok";
          report += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
        }
        report += "connected in " + std::to_string(seconds) + " s\n";
        return ok;
      },
      60s);
  ASSERT_TRUE(child.finished) << "the child hung\n" << child.report;
  EXPECT_EQ(child.exitCode, 0) << child.report;
}

TEST(FdLimits, AShortageThatLastsIsNamedAndEndsInSeconds) {
  ChildResult child = runInChild(
      kLimit,
      [](std::string& report) {
        std::vector<std::string> errors;
        connectStarved(3, -1ms, errors);
        for (size_t r = 0; r < errors.size(); ++r) report += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
        return true;
      },
      60s);
  ASSERT_TRUE(child.finished) << "the child hung\n" << child.report;
  // Ranks 1 and 2 dial and cannot get a socket: they name the shortage; rank 0 only waits for them and times out
  // naming them.
  EXPECT_NE(child.report.find("out of file descriptors: "), std::string::npos) << child.report;
  EXPECT_NE(child.report.find(", limit " + std::to_string(kLimit) +
                              "; raise ulimit -n (or lower "
                              "COLLIE_SOCKETS_PER_PEER)"),
            std::string::npos)
      << child.report;
  EXPECT_EQ(child.report.find("closed the connection"), std::string::npos) << child.report;
  EXPECT_EQ(child.report.find("malformed"), std::string::npos) << child.report;
  EXPECT_EQ(child.report.find(": ok"), std::string::npos) << child.report;
  EXPECT_LT(child.seconds, 20.0);
}

// The hello's descriptors are lost on rank 0, so the dial cannot be answered: rank 0 fails at once naming its
// shortage (before, it only logged it and waited for the dial until its timeout), and rank 1 is turned down.
TEST(FdLimits, AHelloWhoseDescriptorsCannotBeReceivedFailsTheRankNamingIt) {
  ChildResult child = runInChild(
      kLimit,
      [](std::string& report) {
        std::vector<std::string> errors;
        helloDescriptorsStarved(errors);
        report = "rank 0: " + errors[0] + "\nrank 1: " + errors[1] + "\n";
        return true;
      },
      60s);
  ASSERT_TRUE(child.finished) << "the child hung\n" << child.report;
  EXPECT_NE(child.report.find(std::string("rank 0: ") + base::errorCodeName(ErrorCode::SystemError) +
                              ": shm handshake: 3 descriptor(s) from "),
            std::string::npos)
      << child.report;
  EXPECT_NE(child.report.find("could not be received: out of file descriptors: "), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("rank 1: shm connect of rank 1 in test: rank 0 turned the connection down"),
            std::string::npos)
      << child.report;
  EXPECT_LT(child.seconds, 3.0) << child.report;  // not rank 0's 4 s timeout
}

TEST(FdLimits, ACommunicatorTooBigForTheLimitFailsNamingIt) {
  constexpr int n = 6;
  const rlim_t limit = static_cast<rlim_t>(base::fdUsage().open + 40);  // 4 ranks fit in about 60 more
  ChildResult child = runInChild(
      limit,
      [](std::string& report) {
        UniqueId id = UniqueId::create();
        std::vector<std::string> lines(n, "ok");
        Options o;
        o.timeout = 5s;
        o.name = "starved";
        o.connect = ConnectMode::Eager;  // every pair at init: more descriptors than the limit leaves
        testing::runRanks(n, [&](int r) {
          try {
            Communicator::create(n, id, r, o);
          } catch (const Error& e) {
            lines[static_cast<size_t>(r)] = std::string(base::errorCodeName(e.code())) + ": " + e.what();
          }
        });
        for (int r = 0; r < n; ++r) report += "rank " + std::to_string(r) + ": " + lines[static_cast<size_t>(r)] + "\n";
        return true;
      },
      60s);
  ASSERT_TRUE(child.finished) << "the child hung\n" << child.report;
  EXPECT_EQ(child.report.find(": ok\n"), std::string::npos) << "init succeeded under a limit of " << limit << "\n"
                                                            << child.report;
  // The ranks that ran out name it; the others report a peer that went away (which is what they saw), never a
  // malformed message or an internal error. Every system error is the shortage.
  EXPECT_NE(child.report.find("out of file descriptors: "), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("limit " + std::to_string(limit) + "; raise ulimit -n"), std::string::npos)
      << child.report;
  size_t at = 0;
  while ((at = child.report.find("rank ", at)) != std::string::npos) {
    const std::string line = child.report.substr(at, child.report.find('\n', at) - at);
    at += line.size();
    const bool shortage = line.find("out of file descriptors") != std::string::npos;
    const bool peerGone = line.find(base::errorCodeName(ErrorCode::RemoteError)) != std::string::npos ||
                          line.find(base::errorCodeName(ErrorCode::Timeout)) != std::string::npos;
    EXPECT_TRUE(shortage || peerGone) << line;
    EXPECT_EQ(line.find("malformed"), std::string::npos) << line;
  }
  EXPECT_LT(child.seconds, 15.0) << child.report;
}

}  // namespace
}  // namespace collie::test
