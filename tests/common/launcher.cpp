#include "common/launcher.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

namespace collie::test {

bool waitForCount(const std::atomic<int64_t>& counter, int64_t atLeast, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (counter.load() < atLeast) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

int64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- ThreadLauncher ---------------------------------------------------------------------------------------------

void onCApiThreads(int n, const std::function<void(int, collieComm_t)>& fn) {
  std::vector<collieComm_t> comms(static_cast<size_t>(n), nullptr);
  ASSERT_EQ(collieCommInitAll(comms.data(), n, nullptr), collieSuccess) << collieGetLastError(nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ::testing::ScopedTrace trace(__FILE__, __LINE__, "rank " + std::to_string(r));
      fn(r, comms[static_cast<size_t>(r)]);
    });
  for (auto& t : threads) t.join();
  for (collieComm_t c : comms) EXPECT_EQ(collieCommDestroy(c), collieSuccess);
}

void destroyOnePerThread(std::vector<std::unique_ptr<Communicator>>& comms) {
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&c] { c.reset(); });
  for (auto& t : threads) t.join();
}

void ThreadLauncher::run(int nranks, const TestBody& body, const Options& options) {
  ThreadRanks comms(Communicator::createAll(nranks, options));
  runOn(comms, body);
}

void ThreadLauncher::runOn(const std::vector<std::unique_ptr<Communicator>>& comms, const TestBody& body) {
  std::mutex mu;
  std::exception_ptr first;
  int firstRank = -1;
  bool abortedForGtest = false;
  std::once_flag abortOnce;
  auto abortAll = [&] {
    std::call_once(abortOnce, [&] {
      for (const auto& c : comms) c->abort();
    });
  };
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      ::testing::ScopedTrace trace(__FILE__, __LINE__, "rank " + std::to_string(r));
      try {
        body(*comms[r]);
        if (::testing::Test::HasFatalFailure()) {
          {
            std::lock_guard<std::mutex> lock(mu);
            if (!first) abortedForGtest = true;
          }
          abortAll();  // some rank stopped early; the others must not wait for it
        }
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first && !abortedForGtest) {
            first = std::current_exception();
            firstRank = static_cast<int>(r);
          }
        }
        abortAll();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const Error& e) {
    throw Error(e.code(), "rank " + std::to_string(firstRank) + ": " + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(firstRank) + ": " + e.what());
  } catch (...) {
    throw std::runtime_error("rank " + std::to_string(firstRank) + ": unknown exception");
  }
}

// ---- ProcessLauncher --------------------------------------------------------------------------------------------

std::string RankExit::describe() const {
  char buf[256];
  if (exited) {
    snprintf(buf, sizeof buf, "rank %d (pid %d): exited %d after %.2f s", rank, static_cast<int>(pid), exitCode,
             seconds);
  } else if (killedAtDeadline) {
    snprintf(buf, sizeof buf, "rank %d (pid %d): still running at the deadline (%.2f s), killed", rank,
             static_cast<int>(pid), seconds);
  } else {
    snprintf(buf, sizeof buf, "rank %d (pid %d): killed by signal %d (%s) after %.2f s", rank, static_cast<int>(pid),
             signal, strsignal(signal), seconds);
  }
  return buf;
}

::testing::AssertionResult allRanksSucceeded(const std::vector<RankExit>& exits) {
  bool ok = !exits.empty();
  std::string all;
  for (const RankExit& e : exits) {
    ok = ok && e.ok();
    all += "\n  " + e.describe();
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not every rank exited 0 (see the ranks' stderr above):" << all;
}

namespace {

const ::testing::TestResult* currentTestResult() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? info->result() : nullptr;
}

// The whole life of a child: never returns into gtest.
[[noreturn]] void childMain(int rank, int nranks, const UniqueId& id, const Options& options, const TestBody& body,
                            pid_t parent) {
  // Die with the test process instead of lingering in a collective when it crashes.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kChildInitFailure);
  int code = 0;
  const ::testing::TestResult* result = currentTestResult();
  const int partsBefore = result ? result->total_part_count() : 0;
  {
    ::testing::ScopedTrace trace(__FILE__, __LINE__, "rank " + std::to_string(rank));
    std::unique_ptr<Communicator> comm;
    try {
      comm = Communicator::create(nranks, id, rank, options);
    } catch (const std::exception& e) {
      fprintf(stderr, "[rank %d] init failed: %s\n", rank, e.what());
      code = kChildInitFailure;
    }
    if (comm) {
      try {
        body(*comm);
      } catch (const std::exception& e) {
        fprintf(stderr, "[rank %d] exception: %s\n", rank, e.what());
        code = kChildException;
      } catch (...) {
        fprintf(stderr, "[rank %d] unknown exception\n", rank);
        code = kChildException;
      }
      try {
        comm.reset();
      } catch (const std::exception& e) {
        fprintf(stderr, "[rank %d] destroying the communicator threw: %s\n", rank, e.what());
        if (code == 0) code = kChildException;
      }
    }
  }
  if (result) {
    for (int i = partsBefore; i < result->total_part_count(); ++i) {
      const ::testing::TestPartResult& part = result->GetTestPartResult(i);
      if (!part.failed()) continue;
      fprintf(stderr, "[rank %d] %s:%d: gtest failure:\n%s\n", rank, part.file_name() ? part.file_name() : "?",
              part.line_number(), part.message());
      if (code == 0) code = kChildGtestFailure;
    }
  }
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

}  // namespace

ProcessLauncher::ProcessLauncher(int nranks, Options options) : nranks_(nranks), options_(std::move(options)) {
  void* mem = mmap(nullptr, sizeof(SharedArea), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error(std::string("mmap failed: ") + strerror(errno));
  shared_ = new (mem) SharedArea();
  for (auto& c : shared_->counters) c.store(0);
  for (auto& row : shared_->perRank)
    for (auto& v : row) v.store(0);
}

ProcessLauncher::~ProcessLauncher() {
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (pids_[r] > 0 && !exits_[r].exited && exits_[r].signal == 0) {
      ::kill(pids_[r], SIGKILL);
      int status = 0;
      waitpid(pids_[r], &status, 0);
    }
  }
  stopRoot();
  munmap(shared_, sizeof(SharedArea));
}

// The helper: makes the UniqueId (its bootstrap root thread lives here), hands the id to the parent through a
// pipe and waits to be killed. The parent never runs a second thread, so every rank is forked from a
// single-threaded process.
UniqueId ProcessLauncher::startRoot() {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe failed: ") + strerror(errno));
  fflush(stdout);
  fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("fork failed: ") + strerror(err));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kChildInitFailure);
    close(fds[0]);
    try {
      UniqueId id = UniqueId::create();
      if (write(fds[1], &id.raw, sizeof(id.raw)) != static_cast<ssize_t>(sizeof(id.raw))) _exit(kChildInitFailure);
    } catch (const std::exception& e) {
      fprintf(stderr, "[root] UniqueId::create failed: %s\n", e.what());
      _exit(kChildInitFailure);
    }
    for (;;) pause();
  }
  close(fds[1]);
  rootPid_ = pid;
  UniqueId id;
  size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(&id.raw);
  while (got < sizeof(id.raw)) {
    ssize_t n = read(fds[0], bytes + got, sizeof(id.raw) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  if (got != sizeof(id.raw)) {
    stopRoot();
    throw std::runtime_error("the bootstrap root helper process failed before handing over a UniqueId");
  }
  return id;
}

void ProcessLauncher::stopRoot() {
  if (rootPid_ <= 0) return;
  ::kill(rootPid_, SIGKILL);
  int status = 0;
  waitpid(rootPid_, &status, 0);
  rootPid_ = -1;
}

namespace {
int threadsInThisProcess() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int threads = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &threads) == 1) break;
  fclose(f);
  return threads;
}
}  // namespace

void ProcessLauncher::start(const TestBody& body) {
  if (!pids_.empty()) throw std::logic_error("ProcessLauncher::start called twice");
  if (int threads = threadsInThisProcess(); threads > 1)
    throw std::logic_error("ProcessLauncher::start: this process runs " + std::to_string(threads) +
                           " threads; ranks must be forked from a single-threaded process (a child inherits the "
                           "locks other threads hold at fork and can hang on them)");
  const UniqueId id = startRoot();
  fflush(stdout);
  fflush(stderr);
  const pid_t parent = getpid();
  started_ = std::chrono::steady_clock::now();
  exits_.assign(static_cast<size_t>(nranks_), RankExit{});
  for (int r = 0; r < nranks_; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      int err = errno;
      for (pid_t p : pids_) ::kill(p, SIGKILL);
      stopRoot();
      throw std::runtime_error(std::string("fork failed: ") + strerror(err));
    }
    if (pid == 0) {
      for (const RankEnv& e : rankEnv_)
        if (e.rank == r) ::setenv(e.name.c_str(), e.value.c_str(), 1);
      childMain(r, nranks_, id, options_, body, parent);
    }
    pids_.push_back(pid);
    exits_[static_cast<size_t>(r)].rank = r;
    exits_[static_cast<size_t>(r)].pid = pid;
  }
}

void ProcessLauncher::kill(int rank, int sig) {
  if (rank < 0 || rank >= static_cast<int>(pids_.size())) throw std::out_of_range("ProcessLauncher::kill: bad rank");
  ::kill(pids_[static_cast<size_t>(rank)], sig);
}

std::vector<RankExit> ProcessLauncher::wait(std::chrono::milliseconds deadline) {
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(); };
  auto record = [&](size_t r, int status) {
    RankExit& e = exits_[r];
    e.seconds = seconds();
    if (WIFEXITED(status)) {
      e.exited = true;
      e.exitCode = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      e.signal = WTERMSIG(status);
    }
  };
  std::vector<bool> done(pids_.size(), false);
  size_t left = pids_.size();
  while (left > 0) {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      pid_t got = waitpid(pids_[r], &status, WNOHANG);
      if (got == pids_[r]) {
        record(r, status);
        done[r] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() - started_ > deadline) {
      for (size_t r = 0; r < pids_.size(); ++r) {
        if (done[r]) continue;
        ::kill(pids_[r], SIGKILL);
        int status = 0;
        waitpid(pids_[r], &status, 0);
        record(r, status);
        exits_[r].killedAtDeadline = true;
        done[r] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopRoot();
  return exits_;
}

std::vector<RankExit> ProcessLauncher::run(int nranks, const TestBody& body, const Options& options,
                                           std::chrono::milliseconds deadline) {
  ProcessLauncher launcher(nranks, options);
  launcher.start(body);
  return launcher.wait(deadline);
}

std::string runCommand(const std::string& command, int* status) {
  *status = -1;
  std::fflush(stdout);  // the child shares our stdout: what we buffered comes first
  FILE* p = popen(command.c_str(), "r");
  if (!p) return "popen failed: " + std::string(std::strerror(errno));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

}  // namespace collie::test
