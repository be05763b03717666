// Random programs: every rank (a thread) runs the same pseudo-random sequence of calls, drawn from one seed, and
// checks every element of every result and of every buffer a call must not write (common/case_run.hpp). What the
// matrices test one call at a time is mixed here: blocking, async calls left outstanding and waited for later in an
// order of each rank's own, groups of async calls over two communicators, calls on three communicators of one job
// (the world; a split by parity with keys reversed, with connections of its own; a split of every rank sharing
// the world's connections, with keys reversed), every collective, type and op, in place and out, counts across
// slice and chunk sizes, Send/Recv at every distance, each program under one forced algorithm or the tuner's
// choice; in half of the programs each rank runs the parity split's calls on a second thread, at the same time as
// its calls on the other two. Each call's data is shifted by an index base of its own, so a message delivered to
// another call of the same shape is caught.
//
// A test runs programs for a bounded time (COLLIE_RANDOM_SECONDS, default 8 s; at least one program) and prints
// "random programs: N passed, N failed" and the seed of each failure; COLLIE_RANDOM_SEED=S runs program S alone
// (a failure's replay), COLLIE_RANDOM_FROM=S|time starts elsewhere than program 1. Over tcp the test runs again in a
// child with COLLIE_SHM_DISABLE=1 (the variables pass to it).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <collie/collie.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/case_run.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

// Which communicator a call runs on.
enum Comm { kWorld = 0, kParity = 1, kSharing = 2, kComms = 3 };
const char* const kCommNames[kComms] = {"world", "parity", "sharing"};

// One call of a program, the same on every rank.
struct Call {
  Comm comm;
  Coll coll;
  DataType type;
  ReduceOp op;
  size_t count;
  bool inPlace;
  int rootDraw;  // the root is rootDraw mod the communicator's size
  int shiftDraw;
  size_t base;
  bool anySource;  // instead of coll: every other rank sends to the root, which takes them with recvAny
  int delayUs;     // this rank sleeps first when (rank + delayUs) % 3 == 0, so that ranks come at different times
};

// How a run of calls is issued.
enum class Issue { Blocking, Async, Group };

struct Block {
  Issue issue;
  std::vector<Call> calls;
};

struct Program {
  int nranks;
  std::string algo;  // COLLIE_ALGO's grammar; empty: the tuner's choice
  bool twoThreads;   // the parity split's calls run on a second thread of each rank
  std::vector<Block> blocks;
};

const std::vector<size_t> kCounts = {0, 1, 2, 3, 7, 31, 64, 1031, 4095, 4097, 16411, 65537, 262147};

Call drawCall(std::mt19937_64& rng, Comm comm, int nranks) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  Call c{};
  c.comm = comm;
  c.coll = kAllColls[pick(kAllColls.size())];
  c.type = kAllTypes[pick(kAllTypes.size())];
  c.op = kAllOps[pick(kAllOps.size())];
  c.count = kCounts[pick(kCounts.size())];
  // Collectives whose buffers hold nranks blocks stay below a million elements in all.
  const bool blocks = c.coll == Coll::AllGather || c.coll == Coll::ReduceScatter || c.coll == Coll::AllToAll;
  if (blocks && c.count * static_cast<size_t>(nranks) > (size_t{1} << 20)) c.count /= static_cast<size_t>(nranks);
  if (rng() % 40 == 0 && !blocks) c.count = kLargeCount;
  c.inPlace = rng() % 2 == 0;
  c.rootDraw = static_cast<int>(rng() % 64);
  c.shiftDraw = static_cast<int>(rng() % 64);
  c.base = pick(kPeriod);
  c.anySource = rng() % 12 == 0;
  c.delayUs = rng() % 4 == 0 ? static_cast<int>(rng() % 3000) : 0;
  return c;
}

Program drawProgram(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Program p;
  const int sizes[] = {2, 3, 4, 5, 8};
  p.nranks = sizes[rng() % 5];
  const char* algos[] = {"", "", "ring", "tree", "rhd", "direct", "allreduce:ring;broadcast:tree", "allreduce:rhd"};
  p.algo = algos[rng() % 8];
  p.twoThreads = rng() % 2 == 0;
  const int blocks = 6 + static_cast<int>(rng() % 10);
  for (int b = 0; b < blocks; ++b) {
    Block block;
    const unsigned kind = rng() % 4;
    block.issue = kind == 0 ? Issue::Group : kind == 1 ? Issue::Async : Issue::Blocking;
    const int calls = block.issue == Issue::Blocking ? 1 : 1 + static_cast<int>(rng() % 4);
    // A group may mix the parity split with one of the other two, not those two (they share connections, and a
    // group mixing communicators that share is refused).
    const Comm other = rng() % 2 == 0 ? kWorld : kSharing;
    for (int i = 0; i < calls; ++i) {
      Comm comm = static_cast<Comm>(rng() % kComms);
      if (block.issue == Issue::Group && comm != kParity) comm = other;
      block.calls.push_back(drawCall(rng, comm, p.nranks));
      if (block.issue != Issue::Blocking) block.calls.back().anySource = false;  // recvAny is refused in a group
    }
    p.blocks.push_back(std::move(block));
  }
  return p;
}

std::string commLabel(const Call& c, const Communicator& comm) {
  return std::string(kCommNames[c.comm]) + " (rank " + std::to_string(comm.rank()) + " of " +
         std::to_string(comm.size()) + ")";
}

// An any-source case: every rank but the root sends `c.count` elements to it, the root takes them with recvAny and
// checks that each rank's message came once, whole; then a barrier. A receive from any source takes whichever send
// to this rank comes first: without the barrier a rank could send its next message to the root before another
// rank's first arrived, and the root would take it in its place (a program's error, not collie's).
void anySourceCase(Communicator& comm, const Call& c, int root) {
  const int rank = comm.rank(), n = comm.size();
  SCOPED_TRACE("any source: " + typeName(c.type) + " count=" + std::to_string(c.count) +
               " root=" + std::to_string(root) + " base=" + std::to_string(c.base));
  if (rank != root) {
    Buffer send(c.type, c.count);
    send.fillInput(0, c.count, kNoReduction, rank, c.base);
    comm.send(send.data(), c.count, c.type, root);
    EXPECT_TRUE(matchesInput(send.data(), c.count, c.type, kNoReduction, rank, c.base)) << "sendbuff was written";
    comm.barrier();
    return;
  }
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int i = 1; i < n; ++i) {
    Buffer recv(c.type, c.count);
    const int from = comm.recvAny(recv.data(), c.count, c.type);
    ASSERT_TRUE(from >= 0 && from < n && from != root) << "recvAny returned " << from;
    ++seen[static_cast<size_t>(from)];
    EXPECT_TRUE(matchesInput(recv.data(), c.count, c.type, kNoReduction, from, c.base)) << "from rank " << from;
    EXPECT_TRUE(recv.guardsIntact());
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], r == root ? 0 : 1) << "messages of rank " << r;
  comm.barrier();
}

// The calls of `blocks` on `which` communicators, in order, each block keeping its way of issue.
std::vector<Block> only(const std::vector<Block>& blocks, bool parity) {
  std::vector<Block> out;
  for (const Block& b : blocks) {
    Block kept{b.issue, {}};
    for (const Call& c : b.calls)
      if ((c.comm == kParity) == parity) kept.calls.push_back(c);
    if (!kept.calls.empty()) out.push_back(std::move(kept));
  }
  return out;
}

// Runs `blocks` on this thread; every check is a non-fatal gtest failure. `own` draws this thread's order of
// waiting; `label` names the thread in failures.
void runBlocks(Communicator* const comms[kComms], const std::vector<Block>& blocks, std::mt19937_64& own,
               const std::string& label) {
  struct Outstanding {
    std::unique_ptr<CaseRun> run;
    std::vector<Work> works;
    std::string where;
  };
  std::vector<Outstanding> pending;
  auto finish = [&](Outstanding& o) {
    SCOPED_TRACE(o.where);
    for (Work& w : o.works) w.wait();
    o.run->check();
  };
  // Waits for every outstanding call, in an order of this thread's own.
  auto drain = [&] {
    std::shuffle(pending.begin(), pending.end(), own);
    for (Outstanding& o : pending) finish(o);
    pending.clear();
  };
  int callNo = 0;
  for (const Block& block : blocks) {
    std::vector<Outstanding> made;
    for (const Call& c : block.calls) {
      Communicator& comm = *comms[c.comm];
      const int root = c.rootDraw % comm.size();
      if ((comm.rank() + c.delayUs) % 3 == 0 && c.delayUs > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(c.delayUs));
      if (c.anySource) {  // blocking blocks hold one call
        anySourceCase(comm, c, root);
        continue;
      }
      const int shift = comm.size() == 1 ? 0 : 1 + c.shiftDraw % (comm.size() - 1);
      Outstanding o;
      o.run = std::make_unique<CaseRun>(comm, c.coll, c.type, c.op, c.count, c.inPlace, root, c.base, shift);
      o.where = label + " call #" + std::to_string(callNo++) + " on " + commLabel(c, comm) + ": " + o.run->name();
      made.push_back(std::move(o));
    }
    if (block.issue == Issue::Blocking) {
      for (Outstanding& o : made) {
        SCOPED_TRACE(o.where);
        o.run->start(CaseRun::Mode::Blocking);
        o.run->check();
      }
      // Now and then, everything outstanding before the next block.
      if (own() % 3 == 0) drain();
      continue;
    }
    if (block.issue == Issue::Group) groupStart();
    for (Outstanding& o : made) o.works = o.run->start(CaseRun::Mode::Async);
    if (block.issue == Issue::Group) groupEnd();
    for (Outstanding& o : made) pending.push_back(std::move(o));
  }
  drain();
}

// Runs program `p` on this rank: on one thread, or with the parity split's calls on a second thread of the rank,
// at the same time as the others.
void runProgram(Communicator& world, const Program& p, uint64_t seed) {
  const int rank = world.rank(), n = world.size();
  Options parityOptions, sharingOptions;
  parityOptions.name = "parity";
  sharingOptions.name = "sharing";
  sharingOptions.shareConnections = true;
  std::unique_ptr<Communicator> parity = world.split(rank % 2, n - rank, parityOptions);
  std::unique_ptr<Communicator> sharing = world.split(0, n - rank, sharingOptions);
  Communicator* const comms[kComms] = {&world, parity.get(), sharing.get()};
  const std::string label = "seed " + std::to_string(seed);
  std::mt19937_64 own(seed * 1000003 + static_cast<uint64_t>(rank));
  if (!p.twoThreads) {
    runBlocks(comms, p.blocks, own, label);
  } else {
    std::mt19937_64 own2(seed * 1000033 + static_cast<uint64_t>(rank));
    std::thread second([&] {
      try {
        runBlocks(comms, only(p.blocks, true), own2, label + " (second thread)");
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ", second thread: " << e.what();
        parity->abort();  // the peers' calls on it end too
      }
    });
    try {
      runBlocks(comms, only(p.blocks, false), own, label);
    } catch (...) {
      parity->abort();
      second.join();
      throw;
    }
    second.join();
  }
  // Every communicator still agrees: one more checked AllReduce on each.
  for (Communicator* c : comms) checkCase(*c, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 1031, false, 0);
}

// The failed checks the current test has recorded so far.
int failuresSoFar() {
  const ::testing::TestResult* r = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < r->total_part_count(); ++i) failed += r->GetTestPartResult(i).failed() ? 1 : 0;
  return failed;
}

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Runs programs from consecutive seeds for the time budget (stopping after the third that fails).
void runPrograms(const char* label) {
  const int only = envInt("COLLIE_RANDOM_SEED", -1);
  const auto budget = std::chrono::seconds(envInt("COLLIE_RANDOM_SECONDS", 8));
  const auto start = std::chrono::steady_clock::now();
  // Programs 1, 2, 3... by default, so that CI runs the same ones each time (how many depends on the machine's
  // speed); COLLIE_RANDOM_FROM=S starts at S, and COLLIE_RANDOM_FROM=time at a seed taken from the clock, to cover
  // other programs. The seed of a failure is printed; COLLIE_RANDOM_SEED replays it.
  const char* from = std::getenv("COLLIE_RANDOM_FROM");
  uint64_t seed = 1;
  if (only >= 0) {
    seed = static_cast<uint64_t>(only);
  } else if (from != nullptr && std::string(from) == "time") {
    seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000000;
  } else if (from != nullptr && *from) {
    seed = std::strtoull(from, nullptr, 10);
  }
  int passed = 0, failed = 0;
  std::string failedSeeds;
  do {
    const Program p = drawProgram(seed);
    const int before = failuresSoFar();
    {
      std::unique_ptr<ForcedAlgorithm> forced;
      if (!p.algo.empty()) forced = std::make_unique<ForcedAlgorithm>(p.algo);
      SCOPED_TRACE("random program seed " + std::to_string(seed) + " (COLLIE_RANDOM_SEED=" + std::to_string(seed) +
                   " to replay): " + std::to_string(p.nranks) + " ranks, algorithm " +
                   (p.algo.empty() ? std::string("auto") : p.algo) + (p.twoThreads ? ", two threads" : ""));
      try {
        // A call that waits on its peers for 60 s fails (the default is 10 minutes): a hang is reported with its seed.
        ThreadLauncher::run(
            p.nranks, [&](Communicator& world) { runProgram(world, p, seed); },
            lazyOptions(label, std::chrono::seconds(60)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }
    if (failuresSoFar() > before) {
      ++failed;
      failedSeeds += " " + std::to_string(seed);
    } else {
      ++passed;
    }
    ++seed;
  } while (only < 0 && failed < 3 && std::chrono::steady_clock::now() - start < budget);
  printf("random programs (%s): %d passed, %d failed%s%s\n", label, passed, failed,
         failedSeeds.empty() ? "" : "; failed seeds:", failedSeeds.c_str());
  fflush(stdout);
}

TEST(RandomPrograms, EveryResultExactOverShm) { runPrograms("shm"); }

TEST(RandomPrograms, EveryResultExactOverTcp) {
  if (std::getenv("COLLIE_SHM_DISABLE") != nullptr) {
    runPrograms("tcp");
    return;
  }
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1"});
  EXPECT_EQ(status, 0) << "the tcp run failed (its output is above)";
}

}  // namespace
}  // namespace collie::test
