// Every collective, with every rank a thread of this process (ThreadLauncher), checked element by element:
// nranks {1,2,3,4,5,8} x collective, and inside each test every type x op x count x in-place/out-of-place
// (tests/common/bodies.hpp), the large count (1M+3; for ReduceScatter 1M/nranks+3 per rank) included for every type
// and op. COLLIE_TEST_VERBOSE=1 prints the time per count. Plus async calls, groups, split and barrier.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/datatypes.hpp"
#include "common/bodies.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options testOptions() {
  Options o;
  o.timeout = 60s;  // a hang fails the test in a minute instead of COLLIE_TIMEOUT's ten
  o.name = "threaded";
  return o;
}

bool envSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

class CollectiveMatrix : public ::testing::TestWithParam<std::tuple<int, Coll>> {};

TEST_P(CollectiveMatrix, EveryTypeOpCountAndPlacement) {
  const auto [nranks, coll] = GetParam();
  Matrix m;
  m.counts = {0, 1, 7, static_cast<size_t>(nranks - 1), largeCountOf(coll, nranks)};
  m.verbose = envSet("COLLIE_TEST_VERBOSE");
  ThreadLauncher::run(
      nranks, [&](Communicator& comm) { runMatrix(comm, coll, m); }, testOptions());
}

std::string matrixName(const ::testing::TestParamInfo<std::tuple<int, Coll>>& info) {
  return collName(std::get<1>(info.param)) + "_" + std::to_string(std::get<0>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Threads, CollectiveMatrix,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8), ::testing::ValuesIn(kAllColls)),
                         matrixName);

class Threaded : public ::testing::TestWithParam<int> {};

TEST_P(Threaded, AsyncCallsOutstandingAndMixedWithBlocking) {
  ThreadLauncher::run(GetParam(), asyncBody, testOptions());
}

TEST_P(Threaded, Groups) { ThreadLauncher::run(GetParam(), groupBody, testOptions()); }

TEST_P(Threaded, SplitByParityWithReversedKeys) { ThreadLauncher::run(GetParam(), splitBody, testOptions()); }

TEST_P(Threaded, BarrierHoldsEveryRankUntilAllArrive) {
  const int n = GetParam();
  std::atomic<int> arrived{0};
  ThreadLauncher::run(
      n,
      [&](Communicator& comm) {
        for (int round = 0; round < 10; ++round) {
          if (comm.rank() == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a late rank
          arrived.fetch_add(1);
          comm.barrier();
          const int seen = arrived.load();
          // Everyone arrived for this round; nobody can be past the next barrier yet.
          EXPECT_GE(seen, n * (round + 1)) << "round " << round;
          EXPECT_LE(seen, n * (round + 2)) << "round " << round;
        }
        barrierBody(comm);
      },
      testOptions());
}

TEST_P(Threaded, SameCommunicatorsRunManyBodies) {
  // Bodies run one after another on communicators that stay alive (ThreadLauncher::runOn).
  auto comms = Communicator::createAll(GetParam(), testOptions());
  for (Coll coll : kAllColls) {
    ThreadLauncher::runOn(comms, [&](Communicator& comm) {
      checkCase(comm, coll, DataType::Float32, ReduceOp::Sum, 100003, false, comm.size() - 1);
    });
  }
  ThreadLauncher::runOn(comms, barrierBody);
}

INSTANTIATE_TEST_SUITE_P(Threads, Threaded, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// Two sends to the same peer in one group arrive in order, matched with the peer's two receives in order (as in
// NCCL). Sizes: one slice, several slices with a short last one, and an exact multiple of the slice size (where
// interleaved slices of the two messages would not even be caught by a size check).
class SamePeerTwice : public ::testing::TestWithParam<size_t> {};

TEST_P(SamePeerTwice, TwoSendsAndTwoRecvsInOneGroupMatchInOrder) {
  const size_t count = GetParam();
  ThreadLauncher::run(
      2,
      [count](Communicator& comm) {
        const int rank = comm.rank(), peer = 1 - rank;
        const DataType t = DataType::Int32;
        Buffer a(t, count), b(t, count), x(t, count), y(t, count);
        a.fillInput(0, count, kNoReduction, rank, 0);
        b.fillInput(0, count, kNoReduction, rank, 5);  // differs from a
        groupStart();
        comm.send(a.data(), count, t, peer);
        comm.send(b.data(), count, t, peer);
        comm.recv(x.data(), count, t, peer);
        comm.recv(y.data(), count, t, peer);
        groupEnd();
        EXPECT_TRUE(matchesInput(x.data(), count, t, kNoReduction, peer, 0)) << "first message";
        EXPECT_TRUE(matchesInput(y.data(), count, t, kNoReduction, peer, 5)) << "second message";
      },
      testOptions());
}

INSTANTIATE_TEST_SUITE_P(Threads, SamePeerTwice, ::testing::Values(1000, 200003, 1 << 20));

// groupEndAsync returns before the group is done: rank 0 ends its group of uneven sends and receives while rank 1
// has not started its own (it sleeps 600 ms first); the Works complete once it has, with every element right.
TEST(GroupEndAsync, ReturnsAtOnceAndTheWorksCompleteWithTheGroup) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        const int rank = comm.rank(), peer = 1 - rank;
        const DataType t = DataType::Int32;
        const size_t sendCount = rank == 0 ? 1000 : 300001, recvCount = rank == 0 ? 300001 : 1000;
        Buffer out(t, sendCount), in(t, recvCount);
        out.fillInput(0, sendCount, kNoReduction, rank, 0);
        if (rank == 1) std::this_thread::sleep_for(600ms);
        const auto t0 = std::chrono::steady_clock::now();
        groupStart();
        Work sent = comm.sendAsync(out.data(), sendCount, t, peer);
        Work got = comm.recvAsync(in.data(), recvCount, t, peer);
        groupEndAsync();
        if (rank == 0) {
          EXPECT_LT(std::chrono::steady_clock::now() - t0, 300ms) << "groupEndAsync waited for the peer";
        }
        sent.wait();
        got.wait();
        EXPECT_TRUE(matchesInput(in.data(), recvCount, t, kNoReduction, peer, 0));
      },
      testOptions());
}

// A blocking call in a group ended with groupEndAsync: refused before anything is issued (no Work would report the
// blocking call), and the group's async calls fail with the same reason rather than wait forever. The communicator
// stays usable.
TEST(GroupEndAsync, RefusesABlockingCallAndFailsTheGroupsWorks) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        const int peer = 1 - comm.rank();
        std::vector<int32_t> a(64, 7), b(64, -1);
        groupStart();
        Work w = comm.sendAsync(a.data(), a.size(), DataType::Int32, peer);
        comm.recv(b.data(), b.size(), DataType::Int32, peer);  // blocking, deferred to the group's end
        try {
          groupEndAsync();
          ADD_FAILURE() << "groupEndAsync took a blocking call";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
          EXPECT_NE(std::string(e.what()).find("blocking Recv"), std::string::npos) << e.what();
        }
        EXPECT_TRUE(w.test());
        try {
          w.wait();
          ADD_FAILURE() << "the refused group's send reported success";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
        }
        EXPECT_EQ(b, std::vector<int32_t>(64, -1)) << "a refused group touched a buffer";
        int x = comm.rank() + 1;
        comm.allReduce(&x, &x, 1, DataType::Int32, ReduceOp::Sum);
        EXPECT_EQ(x, 3);
      },
      testOptions());
}

// A call refused inside a group fails the whole group, as in NCCL: rank 0 queues a good send, then a send to a rank
// that does not exist, then a good receive; groupEnd issues none of them (rank 1 makes no call in the meantime) and
// throws the refusal, and the good calls' Works fail with it. Were the good send issued, rank 1 would find it ahead
// of the AllReduce that follows (a mismatch) or rank 0 would wait in groupEnd for a receive that never comes. The
// next group starts clean.
TEST(GroupRefusal, ACallRefusedInsideAGroupIssuesNoneOfIt) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        const int rank = comm.rank(), peer = 1 - rank;
        std::vector<int32_t> a(64, 7 + rank), b(64, -1);
        if (rank == 0) {
          groupStart();
          Work sent = comm.sendAsync(a.data(), a.size(), DataType::Int32, peer);
          EXPECT_THROW(comm.sendAsync(a.data(), a.size(), DataType::Int32, 5), Error);  // no rank 5
          Work got = comm.recvAsync(b.data(), b.size(), DataType::Int32, peer);
          expectError("groupEnd after a refused call", ErrorCode::InvalidArgument,
                      {"none of the group's 2 calls was issued", "5"}, [] { groupEnd(); });
          for (Work* w : {&sent, &got}) {
            EXPECT_TRUE(w->test());
            EXPECT_THROW(w->wait(), Error);
          }
          EXPECT_EQ(b, std::vector<int32_t>(64, -1)) << "a refused group touched a buffer";
        }
        int x = rank + 1;
        comm.allReduce(&x, &x, 1, DataType::Int32, ReduceOp::Sum);
        EXPECT_EQ(x, 3);
        groupStart();  // the refusal does not outlive its group
        comm.sendAsync(a.data(), a.size(), DataType::Int32, peer);
        comm.recvAsync(b.data(), b.size(), DataType::Int32, peer);
        groupEnd();
        EXPECT_EQ(b, std::vector<int32_t>(64, 7 + peer));
      },
      testOptions());
}

// groupFail: a caller's own check that fails halfway through building a group fails it like a refused call, and the
// failure made in a nested group reaches the outermost end; outside a group it is refused.
TEST(GroupRefusal, GroupFailFailsTheOutermostGroup) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        const int rank = comm.rank(), peer = 1 - rank;
        std::vector<int32_t> a(16, rank), b(16, -1);
        groupStart();
        Work sent = comm.sendAsync(a.data(), a.size(), DataType::Int32, peer);
        groupStart();
        comm.recvAsync(b.data(), b.size(), DataType::Int32, peer);
        groupFail(ErrorCode::InternalError, "the caller's own check failed");
        groupFail(ErrorCode::SystemError, "a second failure, not kept");
        groupEnd();  // inner: nothing yet
        expectError("groupEnd of a failed group", ErrorCode::InternalError, {"the caller's own check failed"},
                    [] { groupEnd(); });
        EXPECT_THROW(sent.wait(), Error);
        EXPECT_EQ(b, std::vector<int32_t>(16, -1));
        expectError("groupFail outside a group", ErrorCode::InvalidUsage, {"outside a group"},
                    [] { groupFail(ErrorCode::InternalError, "outside"); });
        groupStart();  // codes that are no failure are refused, and leave the group as it was
        for (const int code : {0, 7, 9, -1})
          EXPECT_THROW(groupFail(static_cast<ErrorCode>(code), "no failure"), Error) << "code " << code;
        groupEnd();
        // A typed call whose span is too short is refused before it reaches the communicator: it fails the group too.
        std::vector<int32_t> in(4, 1), out(2, -1);
        groupStart();
        Work pending = comm.sendAsync(a.data(), a.size(), DataType::Int32, peer);
        EXPECT_THROW(comm.allReduce(std::span<const int32_t>(in), std::span<int32_t>(out), ReduceOp::Sum), Error);
        EXPECT_THROW(groupEnd(), Error);
        EXPECT_THROW(pending.wait(), Error);
        int x = 1;
        comm.allReduce(&x, &x, 1, DataType::Int32, ReduceOp::Sum);
        EXPECT_EQ(x, 2);
      },
      testOptions());
}

// A communicator destroyed while calls of it wait in this thread's open group: its calls are dropped (their Works
// fail) and the group fails at its end, without touching the destroyed communicator (before 2026-11-29 the group's
// end used it after it was freed). One rank, whose send to itself and receive in one group need no peer.
TEST(GroupRefusal, ACommunicatorDestroyedInsideAGroupFailsItsGroup) {
  std::vector<std::unique_ptr<Communicator>> comms = Communicator::createAll(1, testOptions());
  std::vector<int32_t> a(8, 5), b(8, -1);
  groupStart();
  Work sent = comms[0]->sendAsync(a.data(), a.size(), DataType::Int32, 0);
  Work got = comms[0]->recvAsync(b.data(), b.size(), DataType::Int32, 0);
  comms[0].reset();
  expectError("groupEnd after a destroy", ErrorCode::InvalidUsage, {"was destroyed"}, [] { groupEnd(); });
  EXPECT_THROW(sent.wait(), Error);
  EXPECT_THROW(got.wait(), Error);
  EXPECT_EQ(b, std::vector<int32_t>(8, -1));
}

// A thread that ends inside an open group while a communicator it owns (thread_local, made before the group's state)
// holds calls in it: the thread's group state is destroyed before that communicator, whose destructor must not read
// it (before 2026-11-29 it did: a use after free, which ASan reports, as a static communicator destroyed at exit did).
TEST(GroupRefusal, AThreadEndingInsideAGroupWithAThreadLocalCommunicatorIsClean) {
  std::thread([] {
    thread_local std::unique_ptr<Communicator> owned;  // constructed here, so destroyed after the group state
    owned = std::move(Communicator::createAll(1, testOptions())[0]);
    static int32_t a[8] = {1}, b[8] = {0};
    groupStart();
    owned->sendAsync(a, 8, DataType::Int32, 0);
    owned->recvAsync(b, 8, DataType::Int32, 0);
  }).join();  // no groupEnd: the thread ends inside its group
}

// An Avg or a PreMulSum in a group reads its input when it runs, after the group's earlier calls wrote it: a Sum then
// the scaling call in place, and a Sum into b then the scaling call on b (the input is scaled as the job runs; before
// 2026-11-29 an Avg's was divided before the group's first call ran, and both gave stale results). Small (one slice,
// the small run) and large counts.
TEST(GroupAvg, AScalingCallReadsWhatAnEarlierCallOfItsGroupWrote) {
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        const Reduction avg = ReduceOp::Avg, preMul = Reduction::preMulSum(static_cast<float>(comm.rank()));
        // The Sum gives 6 everywhere; then an Avg gives 18 / 3, a PreMulSum by the rank 6 x (0 + 1 + 2).
        for (const auto& [op, want] : {std::pair{avg, 6.0f}, std::pair{preMul, 18.0f}}) {
          for (size_t count : {size_t{5}, size_t{300001}}) {
            std::vector<float> x(count, static_cast<float>(comm.rank() + 1)), b(count, 0.0f), d(count, 0.0f);
            groupStart();
            comm.allReduceAsync(x.data(), x.data(), count, DataType::Float32, ReduceOp::Sum);
            comm.allReduceAsync(x.data(), x.data(), count, DataType::Float32, op);
            groupEnd();
            EXPECT_EQ(x, std::vector<float>(count, want))
                << base::reduceOpName(op.op()) << " in place, count " << count;
            std::vector<float> a(count, static_cast<float>(comm.rank() + 1));
            groupStart();
            comm.allReduceAsync(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum);
            comm.allReduceAsync(b.data(), d.data(), count, DataType::Float32, op);
            groupEnd();
            EXPECT_EQ(d, std::vector<float>(count, want))
                << base::reduceOpName(op.op()) << " a -> b -> d, count " << count;
          }
        }
      },
      testOptions());
}

// PreMulSum's factor belongs to each call: repeating one call (the prepared path takes it from the third time on)
// with the factor changed uses the new one (in a group: GroupAvg above).
TEST(PreMulSum, EachCallTakesItsOwnFactorWhenRepeated) {
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        const float mine = static_cast<float>(comm.rank() + 1);  // inputs 1, 2, 3
        for (size_t count : {size_t{5}, size_t{300001}}) {
          std::vector<float> in(count, mine), out(count, 0.0f);
          for (int k = 0; k < 8; ++k) {
            const float factor = k < 5 ? 2.0f : 0.5f * static_cast<float>(comm.rank() + 1);
            comm.allReduce(in.data(), out.data(), count, DataType::Float32, Reduction::preMulSum(factor));
            const float want = k < 5 ? 12.0f : 0.5f * (1 + 4 + 9);
            ASSERT_EQ(out, std::vector<float>(count, want)) << "call " << k << ", count " << count;
          }
          // Sum, PreMulSum and Avg in turn on the same buffers (one plan, kept: the op and factor are read per call).
          const Reduction turns[] = {ReduceOp::Sum, Reduction::preMulSum(2.0f), ReduceOp::Avg,
                                     Reduction::preMulSum(0.5f * mine), ReduceOp::Sum};
          const float turnWant[] = {6, 12, 2, 7, 6};
          for (size_t k = 0; k < 5; ++k) {
            comm.allReduce(in.data(), out.data(), count, DataType::Float32, turns[k]);
            ASSERT_EQ(out, std::vector<float>(count, turnWant[k])) << "turn " << k << ", count " << count;
            ASSERT_EQ(in, std::vector<float>(count, mine)) << "turn " << k << ": the send buffer changed";
          }
        }
      },
      testOptions());
}

// A PreMulSum without its factor, or with a factor of another type than the call's, is refused on the rank that
// makes it (InvalidArgument naming the rank and both types) before any buffer is touched; the communicator goes on.
TEST(PreMulSum, AMissingOrMistypedFactorIsRefusedAndTouchesNothing) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        std::vector<float> in(4, 1.0f), out(4, -7.0f);
        try {
          comm.allReduce(in.data(), out.data(), in.size(), DataType::Float32, Reduction::preMulSum(2.0));
          ADD_FAILURE() << "a float64 factor on float32 data was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
          const std::string why = e.what();
          EXPECT_NE(why.find("rank " + std::to_string(comm.rank())), std::string::npos) << why;
          EXPECT_NE(why.find("factor is float64, the call's datatype is float32"), std::string::npos) << why;
        }
        try {
          comm.reduceScatter(in.data(), out.data(), 2, DataType::Float32, ReduceOp::PreMulSum);
          ADD_FAILURE() << "a PreMulSum without a factor was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
          EXPECT_NE(std::string(e.what()).find("without its factor"), std::string::npos) << e.what();
        }
        EXPECT_THROW(Reduction::preMulSum(nullptr, DataType::Float32), Error);
        EXPECT_EQ(out, std::vector<float>(4, -7.0f));
        EXPECT_EQ(in, std::vector<float>(4, 1.0f));
        comm.allReduce(in.data(), out.data(), in.size(), DataType::Float32, Reduction::preMulSum(3.0f));
        EXPECT_EQ(out, std::vector<float>(4, 6.0f));
      },
      testOptions());
}

// barrier() runs as an AllReduce of nranks uint8 with Max; a rank calling barrier() while the others make that very
// AllReduce must fail as a mismatch on every rank, naming the barrier (before 2026-11-29 every call succeeded).
TEST(BarrierMismatch, ABarrierAgainstTheAllReduceItRunsAsIsAMismatch) {
  Options o = testOptions();
  o.timeout = 20s;
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        std::vector<uint8_t> v(3, 1);
        expectError("barrier against AllReduce(uint8, max, 3)", ErrorCode::InvalidUsage, {"Barrier()"}, [&] {
          if (comm.rank() == 2)
            comm.barrier();
          else
            comm.allReduce(v.data(), v.data(), v.size(), DataType::Uint8, ReduceOp::Max);
        });
      },
      o);
}

// Two ranks, each the root of its Reduce: both only wait to receive, so no message shows the mismatch. They ask each
// other which calls they wait in (through the accept thread, the executors meanwhile waiting) and both fail with it
// within seconds; before 2026-11-29 (evening) both waited until the timeout. Thread ranks over shm, so that TSan sees
// the executors, the accept thread and the shown calls together (test_mismatch_proc.cpp has processes, tcp too).
TEST(WaitingMismatch, TwoRootsThatOnlyReceiveFindTheMismatchByAsking) {
  Options o = testOptions();
  o.timeout = 20s;
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        std::vector<float> v(64, 1.0f), out(64, 0.0f);
        const auto start = std::chrono::steady_clock::now();
        expectError(
            "Reduce rooted at each rank", ErrorCode::InvalidUsage, {"mismatched calls", "root 0", "root 1"},
            [&] { comm.reduce(v.data(), out.data(), v.size(), DataType::Float32, ReduceOp::Sum, comm.rank()); });
        EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
      },
      o);
}

// A rank whose part of a mismatched pair only sent learns of the mismatch at its next send to that peer over shm
// (the peer poisons the lines when it fails); before 2026-11-29 its sends went on succeeding until the ring of
// slots was full.
TEST(SendOnlyMismatch, TheSenderLearnsAtItsNextSendOverShm) {
  std::atomic<bool> receiverFailed{false};
  ThreadLauncher::run(
      2,
      [&](Communicator& comm) {
        std::vector<float> a(200, 1.0f);
        if (comm.rank() == 1) {
          expectError("the receive of 200 against a send of 100", ErrorCode::InvalidUsage, {"mismatched calls"},
                      [&] { comm.recv(a.data(), 200, DataType::Float32, 0); });
          receiverFailed = true;
          return;
        }
        comm.send(a.data(), 100, DataType::Float32, 1);  // completes: it only sent
        while (!receiverFailed) std::this_thread::sleep_for(1ms);
        expectError("the next send", ErrorCode::InvalidUsage, {"mismatched calls", "Recv(float32, 200"},
                    [&] { comm.send(a.data(), 100, DataType::Float32, 1); });
      },
      testOptions());
}

// Communicators with static storage, destroyed after main returns or exit() is called: their destructors run after the
// library's own function-local statics made after them are gone (the parameter registry, a parameter's text, the
// thread's group state), and must not read them. Before 2026-11-29 the parameter registry was read after its
// destruction (ASan reports it). In a child of this binary, which must exit with 0, once after an AllReduce and once
// with calls waiting in an open group, over shm and over tcp.
std::vector<std::unique_ptr<Communicator>> gStaticComms;  // constructed before main, so destroyed last

TEST(Lifecycle, CommunicatorsDestroyedAtExitReadNothingAlreadyDestroyed) {
  if (const char* mode = std::getenv("COLLIE_TEST_EXIT_MODE")) {  // the child
    gStaticComms = Communicator::createAll(2, testOptions());
    static std::vector<int32_t> in(8, 1), out0(8, 0), out1(8, 0), a(8, 1), b(8, 0);
    std::thread peer([] { gStaticComms[1]->allReduce(in.data(), out1.data(), 8, DataType::Int32, ReduceOp::Sum); });
    gStaticComms[0]->allReduce(in.data(), out0.data(), 8, DataType::Int32, ReduceOp::Sum);
    peer.join();
    if (out0 != std::vector<int32_t>(8, 2) || out1 != out0) std::exit(3);
    if (std::string(mode) == "group") {
      groupStart();
      gStaticComms[0]->sendAsync(a.data(), a.size(), DataType::Int32, 1);
      gStaticComms[0]->recvAsync(b.data(), b.size(), DataType::Int32, 1);
    }
    std::exit(0);
  }
  for (const char* shmDisable : {"0", "1"}) {
    for (const char* mode : {"plain", "group"}) {
      SCOPED_TRACE(std::string(mode) + ", COLLIE_SHM_DISABLE=" + shmDisable);
      const int status = rerunCurrentTestWith(
          {std::string("COLLIE_TEST_EXIT_MODE=") + mode, std::string("COLLIE_SHM_DISABLE=") + shmDisable});
      ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit (status " << status << ")";
      EXPECT_EQ(WEXITSTATUS(status), 0);
    }
  }
}

// A small call right after a larger one must not stall. Every TCP socket of a communicator needs TCP_NODELAY: with
// Nagle's algorithm on, a small segment sent while the previous one is unacknowledged waits for the peer's delayed
// ACK (~40 ms on Linux). So: after a barrier, rank 0 broadcasts 4000 bytes and then 4 bytes over the same socket
// (COLLIE_SOCKETS_PER_PEER=1), and rank 1, which sends nothing back in between, times the small one. The median of
// ten rounds is compared, so a scheduling hiccup on a busy machine cannot fail the test; with TCP_NODELAY off the
// median is ~44 ms. The ranks must talk over TCP (threads of one process would otherwise use shm, which has no
// sockets): these params are read once per process, so unless they are already set the test runs itself in a
// child process of this binary with COLLIE_SHM_DISABLE=1, and checks by what ran (lastCall().transport) that it
// was TCP.
void smallAfterLargeBody(Communicator& comm) {
  std::vector<float> medium(1000, 1.0f);
  float one = 1.0f;
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) {
    comm.barrier();
    comm.broadcast(medium.data(), medium.data(), medium.size(), DataType::Float32, 0);
    ASSERT_EQ(comm.lastCall().transport, "tcp") << "the test must run over TCP";
    auto t0 = std::chrono::steady_clock::now();
    comm.broadcast(&one, &one, 1, DataType::Float32, 0);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_EQ(comm.lastCall().transport, "tcp") << "the test must run over TCP";
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 20.0) << "rank " << comm.rank()
                                     << ": median latency of a 4-byte Broadcast after a 4000-byte one, in ms "
                                        "(~40 ms means Nagle's algorithm is on for some socket)";
}

TEST(ThreadedLatency, SmallCallAfterALargerOneDoesNotStall) {
  const char* sockets = std::getenv("COLLIE_SOCKETS_PER_PEER");
  if (envSet("COLLIE_SHM_DISABLE") && sockets && std::string(sockets) == "1") {
    ThreadLauncher::run(2, smallAfterLargeBody, testOptions());
    return;
  }
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1", "COLLIE_SOCKETS_PER_PEER=1"});
  ASSERT_TRUE(WIFEXITED(status)) << "the child run over TCP did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run over TCP failed (its output is above)";
}

TEST(ThreadLauncher, RethrowsTheFirstFailureWithItsRankAndUnblocksTheOthers) {
  // Rank 1 throws while ranks 0 and 2 wait in an AllReduce that can never complete; the launcher aborts them.
  auto t0 = std::chrono::steady_clock::now();
  try {
    ThreadLauncher::run(
        3,
        [](Communicator& comm) {
          if (comm.rank() == 1) throw std::runtime_error("deliberate failure");
          int x = 1;
          comm.allReduce(&x, &x, 1, DataType::Int32, ReduceOp::Sum);
        },
        testOptions());
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rank 1: deliberate failure");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "the blocked ranks were not released promptly";
}

}  // namespace
}  // namespace collie::test
