// A dial to a host that does not answer (base::connectWithRetry's unansweredLimit), on real sockets in a private
// network namespace that the test makes in a forked child: a veth pair, this end 10.213.99.1/24, the other end up
// with no address and a static neighbour entry for 10.213.99.2, so a SYN sent there is delivered and dropped (a
// host that is down or cut off: no SYN-ACK, no refusal), and 10.213.98.0/24 with no route at all. Nothing leaves the
// namespace (its loopback is up, for a refusal from its own address). Skips (exit 77) where no namespace can be made
// (not root) or `ip` is missing.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "base/errors.hpp"
#include "base/socket.hpp"

namespace collie::base {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

struct Outcome {
  ErrorCode code = ErrorCode::Success;
  std::string message;
  double seconds = 0;
};

Outcome dial(const char* address, std::chrono::milliseconds deadline, int retries, std::chrono::milliseconds limit) {
  Outcome out;
  const sockaddr_storage addr = parseAddress(address);
  const auto start = SteadyClock::now();
  try {
    ::close(connectWithRetry(addr, start + deadline, retries, "rank 5", {}, 0, limit));
  } catch (const Error& e) {
    out.code = e.code();
    out.message = e.what();
  }
  out.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return out;
}

// Exit 0: every check held; 77: no namespace here; else failures, each explained on stderr.
int unreachableChild() {
  if (unshare(CLONE_NEWNET) != 0) return 77;
  if (std::system("ip link set lo up && ip link add cu0 type veth peer name cu1 && ip link set cu0 up && "
                  "ip link set cu1 up && "
                  "ip addr add 10.213.99.1/24 dev cu0 && "
                  "ip neigh add 10.213.99.2 lladdr 02:00:00:00:00:02 dev cu0 nud permanent") != 0)
    return 77;
  int failures = 0;
  const auto expect = [&](bool ok, const char* what, const Outcome& o) {
    if (!ok) {
      std::fprintf(stderr, "FAILED: %s: code %d after %.2f s: %s\n", what, static_cast<int>(o.code), o.seconds,
                   o.message.c_str());
      ++failures;
    } else {
      std::fprintf(stderr, "ok: %s (%.2f s): %s\n", what, o.seconds, o.message.c_str());
    }
  };
  const auto says = [](const Outcome& o, const char* text) { return o.message.find(text) != std::string::npos; };

  // SYNs that vanish: RemoteError at the limit, long before the deadline, naming the peer and the window.
  Outcome silent = dial("10.213.99.2:9", 60s, 50, 1000ms);
  expect(silent.code == ErrorCode::RemoteError && silent.seconds >= 0.9 && silent.seconds < 5 &&
             says(silent, "rank 5") && says(silent, "no answer to a connection") &&
             says(silent, "host is down or unreachable") && says(silent, "COLLIE_PEER_DEAD_TIMEOUT=1000"),
         "silent host: RemoteError after the 1 s limit", silent);

  // No route at all (ENETUNREACH at once, retried): the same, at the limit.
  Outcome noRoute = dial("10.213.98.2:9", 60s, 50, 1000ms);
  expect(noRoute.code == ErrorCode::RemoteError && noRoute.seconds >= 0.9 && noRoute.seconds < 5 &&
             says(noRoute, "no answer to a connection"),
         "no route: RemoteError after the 1 s limit", noRoute);

  // Without a limit the silent host is a timeout at the deadline, as before (what a same-host peer gets).
  Outcome unlimited = dial("10.213.99.2:9", 1500ms, 50, 0ms);
  expect(unlimited.code == ErrorCode::Timeout && unlimited.seconds >= 1.4 && unlimited.seconds < 5,
         "no limit: Timeout at the deadline", unlimited);

  // A refusal is an answer (the host is up, nothing listens): the retries run out, never "no answer".
  Outcome refused = dial("10.213.99.1:9", 60s, 3, 100ms);
  expect(refused.code == ErrorCode::SystemError && says(refused, "3 attempts") &&
             !says(refused, "no answer to a connection"),
         "refused: the retries run out, not the unanswered limit", refused);
  return failures == 0 ? 0 : 1;
}

TEST(UnreachableHost, ADialWithNoAnswerFailsAtTheDeadPeerLimitNotTheTimeout) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(unreachableChild());
  int status = 0;
  const auto deadline = SteadyClock::now() + 60s;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (SteadyClock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "the unreachable-host child hung";
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 77)
    GTEST_SKIP() << "no private network namespace with a veth pair here (needs root and iproute2's ip)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's stderr above";
}

}  // namespace
}  // namespace collie::base
