// Dead versus late, with every rank a forked process. A dead peer (SIGKILLed) is reported on every survivor within
// about a second even with COLLIE_TIMEOUT=inf; a late peer (alive, calling seconds after the others, longer than
// COLLIE_PEER_DEAD_TIMEOUT) still completes the call exactly; a stopped peer over TCP (its kernel still answers
// keep-alives) is late, not dead: the others get Timeout at COLLIE_TIMEOUT, not RemoteError at the dead timeout.
// Each case runs over TCP and over shm.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kMs = 1000000;  // ns
enum Counter { kEventNs = 0, kReported = 1, kStarted = 2, kInCall = 3 };
enum PerRank { kCodePlusOne = 0, kErrorAfterNs = 1, kCalls = 2 };

struct Transport {
  const char* name;
  bool shm;
};
class Liveness : public ::testing::TestWithParam<Transport> {
 protected:
  // COLLIE_* values are read once per process: the children, forked after these are set, read them.
  ScopedEnv noShm_{GetParam().shm ? nullptr : "COLLIE_SHM_DISABLE", "1"};
  ScopedEnv deadTimeout_{"COLLIE_PEER_DEAD_TIMEOUT", "1000"};
};

// The peers a Timeout message says this rank waits on ("... while waiting on rank 0 (last seen in AllReduce(...) as
// call #3), rank 2 (...) (...").
std::vector<int> peersWaitedOn(const std::string& message) {
  std::vector<int> peers;
  const std::string key = " while waiting on ";
  size_t pos = message.find(key);
  if (pos == std::string::npos) return peers;
  pos += key.size();
  while (message.compare(pos, 5, "rank ") == 0 && pos + 5 < message.size() &&
         std::isdigit(static_cast<unsigned char>(message[pos + 5]))) {
    pos += 5;
    size_t end = 0;
    peers.push_back(std::stoi(message.substr(pos), &end));
    pos += end;
    if (message.compare(pos, 2, " (") != 0) break;
    int depth = 0;  // skip the peer's parenthesised last call, which holds parentheses of its own
    for (++pos; pos < message.size(); ++pos) {
      depth += message[pos] == '(' ? 1 : message[pos] == ')' ? -1 : 0;
      if (depth == 0) break;
    }
    if (message.compare(pos + 1, 2, ", ") != 0) break;
    pos += 3;
  }
  return peers;
}

TEST_P(Liveness, LatePeerStillCompletesExactly) {
  // Rank 2 calls 3 s after the others: three times the dead-peer window, far under COLLIE_TIMEOUT. The others'
  // calls must wait it out (2.5 s at least) and end exactly.
  constexpr int kRanks = 3;
  Options o;
  o.timeout = 30s;
  o.name = "late";
  ProcessLauncher launcher(kRanks, o);
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int32_t> v(100000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i) * (r + 1);
    if (r == 2) {  // late by 3 s from the moment both others are in the call, however late they got there
      ASSERT_TRUE(waitForCount(sh.counters[kInCall], 2, 30s)) << "ranks 0 and 1 never called";
      std::this_thread::sleep_for(3s);
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (r != 2) sh.counters[kInCall].fetch_add(1);
    comm.allReduce(v.data(), v.data(), v.size(), DataType::Int32, ReduceOp::Sum);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<int32_t>(i) * 6) << "element " << i;
    if (r != 2) {
      EXPECT_GT(std::chrono::steady_clock::now() - t0, 2500ms) << "rank " << r << " did not wait";
    }
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
}

TEST_P(Liveness, KilledPeerIsReportedWithinASecondWithAnInfiniteTimeout) {
  ScopedEnv never("COLLIE_TIMEOUT", "inf");
  constexpr int kRanks = 4, kVictim = 1;
  ProcessLauncher launcher(kRanks, Options{0ms, "dead"});
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> v(1 << 16, 1.0f);
    for (;;) {
      try {
        comm.allReduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Max);
        if (sh.perRank[r][kCalls].fetch_add(1) == 3) sh.counters[kStarted].fetch_add(1);
      } catch (const Error& e) {
        const int64_t event = sh.counters[kEventNs].load();
        sh.perRank[r][kErrorAfterNs].store(monotonicNs() - event);
        sh.perRank[r][kCodePlusOne].store(static_cast<int>(e.code()) + 1);
        EXPECT_NE(event, 0) << e.what();
        EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
        return;
      }
    }
  });
  ASSERT_TRUE(waitForCount(sh.counters[kStarted], kRanks, 60s)) << "the ranks did not get going";
  sh.counters[kEventNs].store(monotonicNs());
  launcher.kill(kVictim, SIGKILL);
  auto exits = launcher.wait(60s);
  std::string seen;
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
    const int64_t after = sh.perRank[r][kErrorAfterNs].load();
    EXPECT_NE(sh.perRank[r][kCodePlusOne].load(), 0) << "rank " << r << " saw no error";
    EXPECT_LT(after, 3000 * kMs) << "rank " << r << " reported the dead peer after " << after / kMs << " ms";
    seen += " rank " + std::to_string(r) + ": " + std::to_string(after / 1000) + " us;";
  }
  std::printf("[%s] killed peer reported after:%s\n", GetParam().name, seen.c_str());
  RecordProperty("detection", seen);
}

TEST_P(Liveness, StoppedPeerIsLateNotDead) {
  // SIGSTOP: the process is frozen but its kernel keeps answering (TCP ACKs and keep-alive probes; over shm the
  // process is alive), so even with a 1 s dead-peer window the others wait for COLLIE_TIMEOUT and report Timeout.
  constexpr int kRanks = 3, kVictim = 2;
  constexpr auto kTimeout = 4s;
  ProcessLauncher launcher(kRanks, Options{kTimeout, "stopped"});
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    // 32 MiB: more than the stopped rank's socket buffers (2 sockets x 4 MiB each way), so its kernel advertises a
    // zero window and the senders probe it for seconds (Linux's TCP_USER_TIMEOUT would call that dead; see
    // base::setDeadPeerTimeout).
    std::vector<float> v(1 << 23, 1.0f);
    for (;;) {
      try {
        comm.allReduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Max);
        if (sh.perRank[r][kCalls].fetch_add(1) == 2) sh.counters[kStarted].fetch_add(1);
      } catch (const Error& e) {
        sh.perRank[r][kErrorAfterNs].store(monotonicNs() - sh.counters[kEventNs].load());
        if (e.code() == ErrorCode::Timeout) {  // it names whom it waits on, never itself
          const std::vector<int> peers = peersWaitedOn(e.what());
          EXPECT_FALSE(peers.empty()) << e.what();
          for (int p : peers) EXPECT_NE(p, r) << "rank " << r << " lists itself: " << e.what();
        }
        sh.perRank[r][kCodePlusOne].store(static_cast<int>(e.code()) + 1);
        sh.counters[kReported].fetch_add(1);
        return;
      }
    }
  });
  ASSERT_TRUE(waitForCount(sh.counters[kStarted], kRanks, 60s)) << "the ranks did not get going";
  sh.counters[kEventNs].store(monotonicNs());
  launcher.kill(kVictim, SIGSTOP);
  const bool reported = waitForCount(sh.counters[kReported], kRanks - 1, 30s);
  launcher.kill(kVictim, SIGKILL);
  auto exits = launcher.wait(30s);
  EXPECT_TRUE(reported);
  bool sawTimeout = false;
  std::string seen;
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
    const int64_t code = sh.perRank[r][kCodePlusOne].load() - 1;
    const int64_t after = sh.perRank[r][kErrorAfterNs].load();
    sawTimeout |= code == static_cast<int>(ErrorCode::Timeout);
    // Nothing may call the stopped peer dead: a RemoteError is allowed only as the echo of another survivor's
    // timeout (it closes its connections), so never before the timeout.
    // (The timeout counts from a survivor's last progress, which may come a little before the event is stamped.)
    EXPECT_GE(after, 4000 * kMs - 1500 * kMs) << "rank " << r << ": code " << code << " after " << after / kMs << " ms";
    seen += " rank " + std::to_string(r) + ": code " + std::to_string(code) + " after " + std::to_string(after / kMs) +
            " ms;";
  }
  EXPECT_TRUE(sawTimeout) << seen;
  std::printf("[%s] stopped peer:%s\n", GetParam().name, seen.c_str());
}

TEST_P(Liveness, TimeoutNamesThePeersWaitedOnAndNeverTheRankItself) {
  // Rank 2 never calls; ranks 0 and 1 time out (1 s) in a small AllReduce (the direct algorithm, which also
  // sends to itself) or an AllToAll, and each names whom it waits on.
  constexpr int kRanks = 3;
  for (int call = 0; call < 2; ++call) {
    ProcessLauncher launcher(kRanks, Options{1s, "self"});
    SharedArea& sh = launcher.shared();
    launcher.start([&sh, call](Communicator& comm) {
      const int r = comm.rank();
      if (r == 2) {
        waitForCount(sh.counters[kReported], kRanks - 1, 30s);
        return;
      }
      std::vector<int32_t> in(6, r), out(6, 0);
      try {
        if (call == 0) comm.allReduce(in.data(), out.data(), 2, DataType::Int32, ReduceOp::Sum);
        if (call == 1) comm.allToAll(in.data(), out.data(), 2, DataType::Int32);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Timeout) {
          const std::vector<int> peers = peersWaitedOn(e.what());
          EXPECT_FALSE(peers.empty()) << e.what();
          for (int p : peers) EXPECT_NE(p, r) << "rank " << r << " lists itself: " << e.what();
        }
      }
      sh.counters[kReported].fetch_add(1);
    });
    EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s))) << "call " << call;
  }
}

// Init in a forked child with `env`=`value` (COLLIE_* values are read once per process): the error, or "" on success.
std::string initError(const char* env, const char* value) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv(env, value, 1);
    std::string what;
    try {
      auto comms = Communicator::createAll(2);
    } catch (const Error& e) {
      what = e.what();
    }
    if (!what.empty() && write(fds[1], what.data(), what.size()) < 0) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

TEST(TimeoutValues, BadValuesFailInitNamingTheVariableAndGoodOnesWork) {
  for (const char* bad : {"-1", "0", "99999999999999999999", "3153600000001", "ten", "5s", ""}) {
    const std::string err = initError("COLLIE_TIMEOUT", bad);
    if (*bad == '\0') {  // empty: unset, the default applies
      EXPECT_EQ(err, "");
      continue;
    }
    EXPECT_NE(err.find("COLLIE_TIMEOUT=" + std::string(bad) + ": expected milliseconds"), std::string::npos)
        << "COLLIE_TIMEOUT=" << bad << ": " << err;
  }
  for (const char* good : {"inf", "never", "5000", "600000"}) EXPECT_EQ(initError("COLLIE_TIMEOUT", good), "") << good;
  for (const char* bad : {"-1", "0x", "999", "inf"}) {
    const std::string err = initError("COLLIE_PEER_DEAD_TIMEOUT", bad);
    EXPECT_NE(err.find("COLLIE_PEER_DEAD_TIMEOUT=" + std::string(bad) + ": expected"), std::string::npos) << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Liveness, ::testing::Values(Transport{"tcp", false}, Transport{"shm", true}),
                         [](const ::testing::TestParamInfo<Transport>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace collie::test
