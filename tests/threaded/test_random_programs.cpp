// Random programs: every rank (a thread) runs the same pseudo-random sequence of calls, drawn from one seed, and
// checks every element of every result and of every buffer a call must not write (common/case_run.hpp). What the
// matrices test one call at a time is mixed here: blocking, async calls left outstanding and waited for later in an
// order of each rank's own, groups of async calls over two communicators, calls on three communicators of one job
// (the world; a split by parity with keys reversed, with connections of its own; a split of every rank sharing
// the world's connections, with keys reversed), every collective, type and op, in place and out, counts across
// slice and chunk sizes, Send/Recv at every distance, receives from any source, each program under one forced
// algorithm or the tuner's choice; in half of the programs each rank runs the parity split's calls on a second
// thread, at the same time as its calls on the other two. Each call's data is shifted by an index base of its own,
// so a message delivered to another call of the same shape is caught.
//
// With a deviant call, one rank makes one call of the program with another count, type, op or root: every rank of
// that communicator must fail with an error (not a timeout), and every call that returns without one must still be
// exact. Errors are then recorded per communicator and the program goes on.
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

#include "base/errors.hpp"
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
  int index;       // in the program
};

// How the deviant rank changes the deviant call: one thing its peers must notice.
enum class Deviance { Count, Type, Op, Root };
const char* const kDevianceNames[] = {"count", "type", "op", "root"};

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
  // A mismatch: world rank devRank makes call devCall (-1: none) with `deviance` changed.
  int devCall = -1;
  int devRank = 0;
  Deviance deviance = Deviance::Count;
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

// The call as the deviant rank makes it: a count, type, op or root of its own. Only a change its peers can see is
// drawn: a collective of 0 elements moves nothing, so only its count can differ visibly; op only where it reduces;
// root only where there is one.
Call deviate(Call c, Deviance d) {
  switch (d) {
    case Deviance::Count:
      ++c.count;
      break;
    case Deviance::Type:
      c.type =
          kAllTypes[(static_cast<size_t>(std::find(kAllTypes.begin(), kAllTypes.end(), c.type) - kAllTypes.begin()) +
                     1) %
                    kAllTypes.size()];
      break;
    case Deviance::Op:
      c.op = kAllOps[(static_cast<size_t>(std::find(kAllOps.begin(), kAllOps.end(), c.op) - kAllOps.begin()) + 1) %
                     kAllOps.size()];
      break;
    case Deviance::Root:
      ++c.rootDraw;
      break;
  }
  return c;
}

// Whether a change of `c` by one rank is one its peers must notice. A collective of 0 elements moves nothing whatever
// its type, op or root, and against 1 element it is not drawn: collie tells it by what the ranks of 0 last made when
// the rank of 1 asks them (MismatchSeenWhileWaiting), but not where a later call of theirs, in a group with it or one
// the rank of 1 waits in elsewhere, goes first (README, Failures). Nor a receive from any source whose root differs
// (a send to a rank that receives nothing from that peer, as with MPI).
bool deviable(const Call& c) { return c.count > 0 || c.anySource || c.coll == Coll::SendRecv; }

Deviance drawDeviance(std::mt19937_64& rng, const Call& c) {
  std::vector<Deviance> visible = {Deviance::Count, Deviance::Type};
  if (!c.anySource && reduces(c.coll)) visible.push_back(Deviance::Op);
  if (!c.anySource && (c.coll == Coll::Broadcast || c.coll == Coll::Reduce)) visible.push_back(Deviance::Root);
  return visible[rng() % visible.size()];
}

Program drawProgram(uint64_t seed, bool withDeviance) {
  std::mt19937_64 rng(seed);
  Program p;
  const int sizes[] = {2, 3, 4, 5, 8};
  p.nranks = sizes[rng() % 5];
  const char* algos[] = {"", "", "ring", "tree", "rhd", "direct", "allreduce:ring;broadcast:tree", "allreduce:rhd"};
  p.algo = algos[rng() % 8];
  p.twoThreads = rng() % 2 == 0;
  const int blocks = 6 + static_cast<int>(rng() % 10);
  int callCount = 0;
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
      block.calls.back().index = callCount++;
    }
    p.blocks.push_back(std::move(block));
  }
  if (withDeviance) {
    // A group that holds a call of a failed communicator is refused whole, on the ranks that know of the failure
    // when they issue it: the others issue its calls on the other communicator, which then wait for peers that
    // never make them (collie cannot tell that from a late peer). So each group here keeps to one communicator.
    for (Block& b : p.blocks)
      if (b.issue == Issue::Group)
        for (Call& c : b.calls) c.comm = b.calls.front().comm;
    std::vector<const Call*> candidates;
    for (const Block& b : p.blocks)
      for (const Call& c : b.calls)
        if (deviable(c)) candidates.push_back(&c);
    if (!candidates.empty()) {  // none: the program runs without a deviant call
      const Call& c = *candidates[rng() % candidates.size()];
      p.devCall = c.index;
      p.devRank = static_cast<int>(rng() % static_cast<uint64_t>(p.nranks));
      p.deviance = drawDeviance(rng, c);
    }
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
void anySourceCase(Communicator& comm, const Call& c, int root, bool deviant) {
  const int rank = comm.rank(), n = comm.size();
  SCOPED_TRACE("any source: " + typeName(c.type) + " count=" + std::to_string(c.count) +
               " root=" + std::to_string(root) + " base=" + std::to_string(c.base));
  if (rank != root) {
    Buffer send(c.type, c.count);
    send.fillInput(0, c.count, kNoReduction, rank, c.base);
    comm.send(send.data(), c.count, c.type, root);
    if (!deviant) {
      EXPECT_TRUE(matchesInput(send.data(), c.count, c.type, kNoReduction, rank, c.base)) << "sendbuff was written";
    }
    comm.barrier();
    return;
  }
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int i = 1; i < n; ++i) {
    Buffer recv(c.type, c.count);
    const int from = comm.recvAny(recv.data(), c.count, c.type);
    if (deviant) continue;
    ASSERT_TRUE(from >= 0 && from < n && from != root) << "recvAny returned " << from;
    ++seen[static_cast<size_t>(from)];
    EXPECT_TRUE(matchesInput(recv.data(), c.count, c.type, kNoReduction, from, c.base)) << "from rank " << from;
    EXPECT_TRUE(recv.guardsIntact());
  }
  for (int r = 0; r < n && !deviant; ++r)
    EXPECT_EQ(seen[static_cast<size_t>(r)], r == root ? 0 : 1) << "messages of rank " << r;
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

// One rank's run of a program: its communicators, and, when the program has a deviant call, which of them failed.
struct RankRun {
  const Program* program = nullptr;
  Communicator* comms[kComms] = {nullptr, nullptr, nullptr};
  int worldRank = 0;
  // Written by the thread that runs the communicator's calls (the parity split's by the second thread, if any).
  bool failed[kComms] = {false, false, false};
  ErrorCode firstCode[kComms] = {ErrorCode::Success, ErrorCode::Success, ErrorCode::Success};
  std::string firstError[kComms];

  // Runs f. Without a deviant call an error is the test's failure (it propagates); with one, it is recorded as a
  // failure of the communicators `on`, and false is returned.
  template <typename F>
  bool attempt(std::initializer_list<Comm> on, F&& f) {
    if (program->devCall < 0) {
      f();
      return true;
    }
    try {
      f();
      return true;
    } catch (const Error& e) {
      for (Comm c : on) {
        if (!failed[c]) firstCode[c] = e.code(), firstError[c] = e.what();
        failed[c] = true;
      }
      return false;
    }
  }
};

// Runs `blocks` on this thread; every check is a non-fatal gtest failure. `own` draws this thread's order of
// waiting; `label` names the thread in failures. A call that returns without an error is checked, the deviant
// one on the deviant rank excepted.
void runBlocks(RankRun& run, const std::vector<Block>& blocks, std::mt19937_64& own, const std::string& label) {
  struct Outstanding {
    std::unique_ptr<CaseRun> run;
    Comm comm;
    bool deviant;
    bool issued = true;
    std::vector<Work> works;
    std::string where;
  };
  std::vector<Outstanding> pending;
  auto finish = [&](Outstanding& o) {
    SCOPED_TRACE(o.where);
    if (!o.issued) return;
    if (run.attempt({o.comm},
                    [&] {
                      for (Work& w : o.works) w.wait();
                    }) &&
        !o.deviant)
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
    for (const Call& drawn : block.calls) {
      const bool deviant = drawn.index == run.program->devCall && run.worldRank == run.program->devRank;
      const Call c = deviant ? deviate(drawn, run.program->deviance) : drawn;
      Communicator& comm = *run.comms[c.comm];
      const int root = c.rootDraw % comm.size();
      if ((comm.rank() + c.delayUs) % 3 == 0 && c.delayUs > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(c.delayUs));
      if (c.anySource) {  // blocking blocks hold one call
        run.attempt({c.comm}, [&] { anySourceCase(comm, c, root, deviant); });
        continue;
      }
      const int shift = comm.size() == 1 ? 0 : 1 + c.shiftDraw % (comm.size() - 1);
      Outstanding o;
      o.run = std::make_unique<CaseRun>(comm, c.coll, c.type, c.op, c.count, c.inPlace, root, c.base, shift);
      o.comm = c.comm;
      o.deviant = deviant;
      o.where = label + " call #" + std::to_string(callNo++) + " on " + commLabel(c, comm) + ": " + o.run->name() +
                (deviant ? " (the deviant call)" : "");
      made.push_back(std::move(o));
    }
    if (block.issue == Issue::Blocking) {
      for (Outstanding& o : made) {
        SCOPED_TRACE(o.where);
        if (run.attempt({o.comm}, [&] { o.run->start(CaseRun::Mode::Blocking); }) && !o.deviant) o.run->check();
      }
      // Now and then, everything outstanding before the next block.
      if (own() % 3 == 0) drain();
      continue;
    }
    // A call refused when issued (its communicator failed earlier), or a group that failed, is not waited for.
    if (block.issue == Issue::Group) {
      const bool issued = run.attempt({made.front().comm, made.back().comm}, [&] {
        grouped([&] {
          for (Outstanding& o : made) o.works = o.run->start(CaseRun::Mode::Async);
        });
      });
      for (Outstanding& o : made) o.issued = issued;
    } else {
      for (Outstanding& o : made)
        o.issued = run.attempt({o.comm}, [&] { o.works = o.run->start(CaseRun::Mode::Async); });
    }
    for (Outstanding& o : made) pending.push_back(std::move(o));
  }
  drain();
}

// Runs program `p` on this rank: on one thread, or with the parity split's calls on a second thread of the rank,
// at the same time as the others. With a deviant call, checks at the end that every rank of the communicator it was
// made on saw an error there.
void runProgram(Communicator& world, const Program& p, uint64_t seed) {
  const int rank = world.rank(), n = world.size();
  Options parityOptions, sharingOptions;
  parityOptions.name = "parity";
  sharingOptions.name = "sharing";
  sharingOptions.shareConnections = true;
  std::unique_ptr<Communicator> parity = world.split(rank % 2, n - rank, parityOptions);
  std::unique_ptr<Communicator> sharing = world.split(0, n - rank, sharingOptions);
  RankRun run{};
  run.program = &p;
  run.comms[kWorld] = &world;
  run.comms[kParity] = parity.get();
  run.comms[kSharing] = sharing.get();
  run.worldRank = rank;
  const std::string label = "seed " + std::to_string(seed);
  std::mt19937_64 own(seed * 1000003 + static_cast<uint64_t>(rank));
  if (!p.twoThreads) {
    runBlocks(run, p.blocks, own, label);
  } else {
    std::mt19937_64 own2(seed * 1000033 + static_cast<uint64_t>(rank));
    std::thread second([&] {
      try {
        runBlocks(run, only(p.blocks, true), own2, label + " (second thread)");
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ", second thread: " << e.what();
        parity->abort();  // the peers' calls on it end too
      }
    });
    try {
      runBlocks(run, only(p.blocks, false), own, label);
    } catch (...) {
      parity->abort();
      second.join();
      throw;
    }
    second.join();
  }
  // Every communicator still agrees: one more checked AllReduce on each (after a deviant call, one that fails on
  // every rank of its communicator).
  for (int c = 0; c < kComms; ++c) {
    run.attempt({static_cast<Comm>(c)},
                [&] { checkCase(*run.comms[c], Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 1031, false, 0); });
  }
  if (p.devCall < 0) return;
  Comm devComm = kWorld;
  for (const Block& b : p.blocks)
    for (const Call& c : b.calls)
      if (c.index == p.devCall) devComm = c.comm;
  const bool member = devComm != kParity || rank % 2 == p.devRank % 2;
  if (member && run.comms[devComm]->size() > 1) {
    EXPECT_TRUE(run.failed[devComm]) << "rank " << rank << " saw no error on " << kCommNames[devComm] << " after rank "
                                     << p.devRank << " changed the " << kDevianceNames[static_cast<int>(p.deviance)]
                                     << " of call " << p.devCall;
    // The first error a rank sees names the mismatch, or that a peer failed (it may learn of it that way first).
    const ErrorCode code = run.firstCode[devComm];
    EXPECT_TRUE(code == ErrorCode::InvalidUsage || code == ErrorCode::RemoteError)
        << "rank " << rank << ": " << base::errorCodeName(code) << ": " << run.firstError[devComm];
  }
}

// The failed checks the current test has recorded so far.
int failuresSoFar() {
  const ::testing::TestResult* r = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < r->total_part_count(); ++i) failed += r->GetTestPartResult(i).failed() ? 1 : 0;
  return failed;
}

// The program as text, one call a line (COLLIE_RANDOM_PRINT=1 prints it before it runs).
std::string listing(const Program& p) {
  static const char* const issues[] = {"blocking", "async", "group"};
  std::string out;
  for (const Block& b : p.blocks) {
    out += std::string(issues[static_cast<int>(b.issue)]) + ":\n";
    for (const Call& c : b.calls) {
      out += "  #" + std::to_string(c.index) + " " + kCommNames[c.comm] + " " +
             (c.anySource ? "any-source " + typeName(c.type) + " count=" + std::to_string(c.count)
                          : collName(c.coll) + " " + typeName(c.type) + " " + opName(c.op) +
                                " count=" + std::to_string(c.count) + (c.inPlace ? " in-place" : "")) +
             " rootDraw=" + std::to_string(c.rootDraw) + " shiftDraw=" + std::to_string(c.shiftDraw) +
             (c.index == p.devCall ? " <- rank " + std::to_string(p.devRank) + " changes its " +
                                         kDevianceNames[static_cast<int>(p.deviance)]
                                   : std::string()) +
             "\n";
    }
  }
  return out;
}

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Runs programs from consecutive seeds for the time budget (stopping after the third that fails); with
// `deviant`, each has one call that one rank makes differently.
void runPrograms(const char* label, bool deviant = false) {
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
    const Program p = drawProgram(seed, deviant);
    const int before = failuresSoFar();
    const auto began = std::chrono::steady_clock::now();
    if (envInt("COLLIE_RANDOM_PRINT", 0) != 0)
      printf("program %llu, %d ranks, %s%s:\n%s", static_cast<unsigned long long>(seed), p.nranks,
             p.algo.empty() ? "auto" : p.algo.c_str(), p.twoThreads ? ", two threads" : "", listing(p).c_str());
    {
      std::unique_ptr<ForcedAlgorithm> forced;
      if (!p.algo.empty()) forced = std::make_unique<ForcedAlgorithm>(p.algo);
      SCOPED_TRACE("random program seed " + std::to_string(seed) + " (COLLIE_RANDOM_SEED=" + std::to_string(seed) +
                   " to replay): " + std::to_string(p.nranks) + " ranks, algorithm " +
                   (p.algo.empty() ? std::string("auto") : p.algo) + (p.twoThreads ? ", two threads" : "") +
                   (deviant ? ", rank " + std::to_string(p.devRank) + " changes the " +
                                  kDevianceNames[static_cast<int>(p.deviance)] + " of call " + std::to_string(p.devCall)
                            : std::string()));
      try {
        // A call that waits on its peers for 60 s fails (the default is 10 minutes): a hang is reported with its seed.
        ThreadLauncher::run(
            p.nranks, [&](Communicator& world) { runProgram(world, p, seed); },
            lazyOptions(label, std::chrono::seconds(60)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
      // A mismatch is found when its messages arrive or, where a rank waits for messages that do not come, when it
      // asks its peers (after seconds): well before the 60 s a call waits.
      EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(45)) << "slow to fail";
    }
    if (failuresSoFar() > before) {
      ++failed;
      failedSeeds += " " + std::to_string(seed);
    } else {
      ++passed;
    }
    ++seed;
  } while (only < 0 && failed < 3 && std::chrono::steady_clock::now() - start < budget);
  printf("random programs%s (%s): %d passed, %d failed%s%s\n", deviant ? " with a deviant call" : "", label, passed,
         failed, failedSeeds.empty() ? "" : "; failed seeds:", failedSeeds.c_str());
  fflush(stdout);
}

TEST(RandomPrograms, EveryResultExactOverShm) { runPrograms("shm"); }

// One call made differently by one rank (its count, type, op or root): every rank of that communicator fails with an
// error, none hangs, and every call that returns without one has exact results, on every rank.
TEST(RandomPrograms, ADeviantCallFailsItsCommunicatorEverywhereAndNothingIsWrongOverShm) { runPrograms("shm", true); }

TEST(RandomPrograms, EveryResultExactOverTcp) {
  if (std::getenv("COLLIE_SHM_DISABLE") != nullptr) {
    runPrograms("tcp");
    return;
  }
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1"});
  EXPECT_EQ(status, 0) << "the tcp run failed (its output is above)";
}

TEST(RandomPrograms, ADeviantCallFailsItsCommunicatorEverywhereAndNothingIsWrongOverTcp) {
  if (std::getenv("COLLIE_SHM_DISABLE") != nullptr) {
    runPrograms("tcp", true);
    return;
  }
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1"});
  EXPECT_EQ(status, 0) << "the tcp run failed (its output is above)";
}

}  // namespace
}  // namespace collie::test
