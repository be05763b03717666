// One test body, many launchers (STYLE.md item 3). A test body is `void(collie::Communicator&)`: it runs on
// every rank and checks what that rank sees. The launchers decide how the ranks exist:
//   ThreadLauncher   one thread per rank in this process (Communicator::createAll); the first failure is
//                    rethrown, naming its rank, after the other ranks were aborted so that none of them hangs.
//   ProcessLauncher  one forked process per rank (Communicator::create in each child); a child that fails
//                    (gtest failure or exception) prints why, prefixed by its rank, and exits non-zero; the
//                    parent collects every exit status under a deadline and can kill a rank on purpose.
//                    The UniqueId, and with it the bootstrap root thread, is made in a forked helper process, so
//                    that the parent stays single-threaded: a child forked from a multi-threaded process inherits
//                    any lock another thread held at that moment (the sanitizers' allocator locks included) and
//                    can hang on it for ever.
#pragma once

#include <collie/collie.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <collie/collie.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace collie::test {

/// What every launcher runs on every rank.
using TestBody = std::function<void(Communicator&)>;

/// Options for connections on first use (ConnectMode::Lazy), with a name and a timeout (0: collie's default).
inline Options lazyOptions(std::string name = {}, std::chrono::milliseconds timeout = {}) {
  Options o;
  o.timeout = timeout;
  o.name = std::move(name);
  o.connect = ConnectMode::Lazy;
  return o;
}

/// Makes n communicators with collieCommInitAll (the C API), runs fn(rank, comm) on one thread per rank, destroys
/// them.
void onCApiThreads(int n, const std::function<void(int, collieComm_t)>& fn);

/// Destroys each communicator on a thread of its own, as the ranks of a job destroy theirs: a destructor may wait
/// a while (a UCX worker drains for 100 ms), which one thread destroying them in turn would pay N times.
void destroyOnePerThread(std::vector<std::unique_ptr<Communicator>>& comms);

/// Communicators of thread ranks (Communicator::createAll) destroyed by destroyOnePerThread when this goes.
class ThreadRanks : public std::vector<std::unique_ptr<Communicator>> {
 public:
  explicit ThreadRanks(std::vector<std::unique_ptr<Communicator>> comms) : vector(std::move(comms)) {}
  ThreadRanks(ThreadRanks&&) = default;
  ~ThreadRanks() { destroyOnePerThread(*this); }
};

/// Runs a body on one thread per rank.
class ThreadLauncher {
 public:
  /// Creates nranks communicators (createAll), runs body on each in its own thread, destroys them. When a rank
  /// throws or records a fatal gtest failure, every communicator is aborted (blocked ranks return errors) and
  /// the first exception is rethrown as std::runtime_error("rank R: ...").
  static void run(int nranks, const TestBody& body, const Options& options = {});
  /// The same on communicators that already exist (they stay alive).
  static void runOn(const std::vector<std::unique_ptr<Communicator>>& comms, const TestBody& body);
};

/// How one child process ended.
struct RankExit {
  int rank = -1;
  pid_t pid = -1;
  bool exited = false;  ///< exited normally (then exitCode is set)
  int exitCode = -1;    ///< valid when exited
  int signal = 0;       ///< the signal that ended it, when !exited
  bool killedAtDeadline = false;
  double seconds = 0;  ///< from start() to its end as the parent saw it
  bool ok() const { return exited && exitCode == 0; }
  std::string describe() const;
};

/// Exit codes a child uses.
inline constexpr int kChildGtestFailure = 1;
inline constexpr int kChildException = 2;
inline constexpr int kChildInitFailure = 3;

/// A page of memory shared by the parent and every child (MAP_SHARED before fork), for tests that coordinate
/// across processes: counters, timestamps, per-rank results.
struct SharedArea {
  std::atomic<int64_t> counters[16];
  std::atomic<int64_t> perRank[64][8];
};

/// Waits until `counter` (of a SharedArea, or any other) is at least `atLeast`; false if `limit` passed first.
bool waitForCount(const std::atomic<int64_t>& counter, int64_t atLeast, std::chrono::milliseconds limit);

/// Runs a body in one forked process per rank.
class ProcessLauncher {
 public:
  explicit ProcessLauncher(int nranks, Options options = {});
  ~ProcessLauncher();  ///< kills and reaps children still running
  ProcessLauncher(const ProcessLauncher&) = delete;
  ProcessLauncher& operator=(const ProcessLauncher&) = delete;

  /// Sets an environment variable in one rank's child only, before it creates its communicator (call before start).
  void setEnv(int rank, std::string name, std::string value) {
    rankEnv_.push_back({rank, std::move(name), std::move(value)});
  }
  /// Forks the root helper (which makes the UniqueId) and one child per rank; returns at once. Each child creates its
  /// communicator, runs body, destroys the communicator and _exit()s: 0, or kChildGtestFailure / kChildException /
  /// kChildInitFailure with the reason on stderr prefixed "[rank R] ".
  void start(const TestBody& body);
  /// The pid of each rank's child (after start).
  const std::vector<pid_t>& pids() const { return pids_; }
  /// Sends a signal to one rank's child.
  void kill(int rank, int sig);
  /// Waits for every child until `deadline` after start(); children still running then are SIGKILLed.
  std::vector<RankExit> wait(std::chrono::milliseconds deadline = std::chrono::seconds(120));
  /// Memory shared with the children (zeroed before start).
  SharedArea& shared() { return *shared_; }

  /// start() + wait().
  static std::vector<RankExit> run(int nranks, const TestBody& body, const Options& options = {},
                                   std::chrono::milliseconds deadline = std::chrono::seconds(120));

 private:
  int nranks_;
  Options options_;
  struct RankEnv {
    int rank;
    std::string name, value;
  };
  std::vector<RankEnv> rankEnv_;
  std::vector<pid_t> pids_;
  std::vector<RankExit> exits_;
  SharedArea* shared_ = nullptr;
  pid_t rootPid_ = -1;  ///< the helper process that hosts the bootstrap root
  std::chrono::steady_clock::time_point started_;

  UniqueId startRoot();
  void stopRoot();
};

/// Success when every rank exited 0; otherwise lists each rank's ending.
::testing::AssertionResult allRanksSucceeded(const std::vector<RankExit>& exits);

/// Nanoseconds on CLOCK_MONOTONIC, comparable between the processes of one machine.
int64_t monotonicNs();

/// Runs `command` through the shell; returns what it wrote to stdout (redirect stderr in the command to see it too)
/// and sets *status to its exit status (-1 when it did not exit normally or could not be started).
std::string runCommand(const std::string& command, int* status);

}  // namespace collie::test
