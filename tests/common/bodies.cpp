#include "common/bodies.hpp"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <thread>

#include "common/case_run.hpp"

namespace collie::test {

std::string collName(Coll coll) {
  switch (coll) {
    case Coll::AllReduce:
      return "AllReduce";
    case Coll::Broadcast:
      return "Broadcast";
    case Coll::Reduce:
      return "Reduce";
    case Coll::AllGather:
      return "AllGather";
    case Coll::ReduceScatter:
      return "ReduceScatter";
    case Coll::AllToAll:
      return "AllToAll";
    case Coll::SendRecv:
      return "SendRecv";
  }
  return "?";
}

bool reduces(Coll coll) { return coll == Coll::AllReduce || coll == Coll::Reduce || coll == Coll::ReduceScatter; }

void checkCase(Communicator& comm, Coll coll, DataType type, ReduceOp op, size_t count, bool inPlace, int root) {
  CaseRun run(comm, coll, type, op, count, inPlace, root);
  SCOPED_TRACE(run.name());
  run.start(CaseRun::Mode::Blocking);
  checkLastCall(comm, run.lastCallName());
  run.check();
}

void runMatrix(Communicator& comm, Coll coll, const Matrix& m) {
  std::vector<size_t> counts;
  for (size_t c : m.counts)
    if (std::find(counts.begin(), counts.end(), c) == counts.end()) counts.push_back(c);
  const std::vector<ReduceOp> noOp = {kNoReduction};
  const bool hasInPlace = m.inPlace && coll != Coll::AllToAll && coll != Coll::SendRecv;
  std::map<size_t, std::pair<double, int>> timing;  // count -> seconds, calls
  int caseNo = 0;
  for (DataType type : m.types) {
    for (ReduceOp op : reduces(coll) ? m.ops : noOp) {
      for (size_t count : counts) {
        for (int ip = 0; ip < (hasInPlace ? 2 : 1); ++ip) {
          const int root = (caseNo++ % 2 == 0) ? comm.size() - 1 : 0;
          auto t0 = std::chrono::steady_clock::now();
          checkCase(comm, coll, type, op, count, ip == 1, root);
          auto& [secs, calls] = timing[count];
          secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          ++calls;
        }
      }
    }
  }
  if (m.verbose && comm.rank() == 0) {
    for (auto& [count, t] : timing) {
      printf("[timing] %s nranks=%d count=%zu: %d calls, %.3f s (%.2f ms per call, checks included)\n",
             collName(coll).c_str(), comm.size(), count, t.second, t.first, 1e3 * t.first / t.second);
    }
    fflush(stdout);
  }
}

void asyncBody(Communicator& comm) {
  const int rank = comm.rank(), n = comm.size();
  struct Call {
    DataType type;
    ReduceOp op;
    size_t count;
  };
  // Outstanding at once: four async calls, a blocking one, two more async ones.
  const std::vector<Call> before = {{DataType::Float32, ReduceOp::Sum, 300001},
                                    {DataType::Int32, ReduceOp::Max, 1},
                                    {DataType::Bfloat16, ReduceOp::Avg, 70000},
                                    {DataType::Int8, ReduceOp::Prod, 4099}};
  const std::vector<Call> after = {{DataType::Float64, ReduceOp::Min, 123457}, {DataType::Uint8, ReduceOp::Sum, 0}};
  std::vector<std::unique_ptr<Buffer>> bufs;
  std::vector<Work> works;
  auto launch = [&](const Call& c) {
    bufs.push_back(std::make_unique<Buffer>(c.type, c.count));
    bufs.back()->fillInput(0, c.count, c.op, rank, 0);
    works.push_back(comm.allReduceAsync(bufs.back()->data(), bufs.back()->data(), c.count, c.type, c.op));
    EXPECT_TRUE(works.back().valid());
  };
  for (const Call& c : before) launch(c);
  {
    Buffer send(DataType::Uint64, 5000), recv(DataType::Uint64, 5000);
    send.fillInput(0, 5000, ReduceOp::Sum, rank, 0);
    comm.allReduce(send.data(), recv.data(), 5000, DataType::Uint64, ReduceOp::Sum);
    checkLastCall(comm, "allreduce");
    EXPECT_TRUE(matchesReduced(recv.data(), 5000, DataType::Uint64, ReduceOp::Sum, n, 0)) << "blocking call";
    // A blocking call queued behind async work runs after it, so the earlier calls are done by now.
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(works[i].test()) << "async call " << i;
  }
  for (const Call& c : after) launch(c);
  std::vector<Call> all = before;
  all.insert(all.end(), after.begin(), after.end());
  // The last one polled with test(), the others waited for in order.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!works.back().test() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE("async call " + std::to_string(i) + ": " + typeName(all[i].type) + " " + opName(all[i].op) +
                 " count=" + std::to_string(all[i].count));
    works[i].wait();
    EXPECT_TRUE(works[i].test());
    EXPECT_EQ(works[i].error(), ErrorCode::Success);
    EXPECT_EQ(works[i].errorMessage(), "");
    EXPECT_TRUE(matchesReduced(bufs[i]->data(), all[i].count, all[i].type, all[i].op, n, 0));
    EXPECT_TRUE(bufs[i]->guardsIntact());
    works[i].wait();  // waiting twice is fine
  }

  // The other async forms.
  const size_t count = 1001;
  const DataType t = DataType::Int32;
  const size_t nr = static_cast<size_t>(n), me = static_cast<size_t>(rank);
  Buffer bc(t, count), rd(t, count), agIn(t, count), ag(t, nr * count), rsIn(t, nr * count), rs(t, count),
      aaIn(t, nr * count), aa(t, nr * count);
  const int root = n - 1;
  if (rank == root) bc.fillInput(0, count, kNoReduction, root, 0);
  rd.fillInput(0, count, ReduceOp::Sum, rank, 0);
  agIn.fillInput(0, count, kNoReduction, rank, 0);
  rsIn.fillInput(0, nr * count, ReduceOp::Max, rank, 0);
  aaIn.fillInput(0, nr * count, kNoReduction, rank, 0);
  std::vector<Work> more = {comm.broadcastAsync(bc.data(), bc.data(), count, t, root),
                            comm.reduceAsync(rd.data(), rd.data(), count, t, ReduceOp::Sum, root),
                            comm.allGatherAsync(agIn.data(), ag.data(), count, t),
                            comm.reduceScatterAsync(rsIn.data(), rs.data(), count, t, ReduceOp::Max),
                            comm.allToAllAsync(aaIn.data(), aa.data(), count, t)};
  for (Work& w : more) w.wait();
  checkLastCall(comm, "alltoall");  // the last one issued
  EXPECT_TRUE(matchesInput(bc.data(), count, t, kNoReduction, root, 0)) << "broadcastAsync";
  if (rank == root) {
    EXPECT_TRUE(matchesReduced(rd.data(), count, t, ReduceOp::Sum, n, 0)) << "reduceAsync";
  } else {
    EXPECT_TRUE(matchesInput(rd.data(), count, t, ReduceOp::Sum, rank, 0)) << "reduceAsync, non-root";
  }
  for (int p = 0; p < n; ++p) {
    const size_t pb = static_cast<size_t>(p) * count;
    EXPECT_TRUE(matchesInput(ag.at(pb), count, t, kNoReduction, p, 0)) << "allGatherAsync block " << p;
    EXPECT_TRUE(matchesInput(aa.at(pb), count, t, kNoReduction, p, me * count)) << "allToAllAsync block " << p;
  }
  EXPECT_TRUE(matchesReduced(rs.data(), count, t, ReduceOp::Max, n, me * count)) << "reduceScatterAsync";

  // sendAsync / recvAsync around a ring outside a group: even ranks send first, odd ranks receive first.
  if (n > 1) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    Buffer out(t, 100000), in(t, 100000);
    out.fillInput(0, 100000, kNoReduction, rank, 0);
    Work a, b;
    if (rank % 2 == 0) {
      a = comm.sendAsync(out.data(), 100000, t, next);
      b = comm.recvAsync(in.data(), 100000, t, prev);
    } else {
      b = comm.recvAsync(in.data(), 100000, t, prev);
      a = comm.sendAsync(out.data(), 100000, t, next);
    }
    a.wait();
    b.wait();
    checkLastCall(comm, "");
    EXPECT_TRUE(matchesInput(in.data(), 100000, t, kNoReduction, prev, 0)) << "recvAsync from " << prev;
  }
}

void groupBody(Communicator& comm) {
  const int rank = comm.rank(), n = comm.size();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const DataType t = DataType::Float32;
  const size_t count = 200003;
  // Both directions of the ring at once (with 1 or 2 ranks, next == prev: two sends to one peer in a group).
  {
    Buffer out(t, count), fromPrev(t, count), fromNext(t, count);
    out.fillInput(0, count, kNoReduction, rank, 0);
    grouped([&] {
      comm.recv(fromPrev.data(), count, t, prev);
      comm.send(out.data(), count, t, next);
      comm.send(out.data(), count, t, prev);
      comm.recv(fromNext.data(), count, t, next);
    });
    checkLastCall(comm, "");
    EXPECT_TRUE(matchesInput(fromPrev.data(), count, t, kNoReduction, prev, 0)) << "from prev " << prev;
    EXPECT_TRUE(matchesInput(fromNext.data(), count, t, kNoReduction, next, 0)) << "from next " << next;
  }
  // Different collectives issued together, one of them async; a nested group inside.
  {
    const size_t c = 4097;
    Buffer ar(t, c), bc(DataType::Int64, c), agIn(DataType::Bfloat16, c), ag(DataType::Bfloat16, c * n),
        ar2(DataType::Int8, c);
    ar.fillInput(0, c, ReduceOp::Sum, rank, 0);
    if (rank == 0) bc.fillInput(0, c, kNoReduction, 0, 0);
    agIn.fillInput(0, c, kNoReduction, rank, 0);
    ar2.fillInput(0, c, ReduceOp::Min, rank, 0);
    Work w;
    grouped([&] {
      comm.allReduce(ar.data(), ar.data(), c, t, ReduceOp::Sum);
      grouped([&] { comm.broadcast(bc.data(), bc.data(), c, DataType::Int64, 0); });
      w = comm.allReduceAsync(ar2.data(), ar2.data(), c, DataType::Int8, ReduceOp::Min);
      comm.allGather(agIn.data(), ag.data(), c, DataType::Bfloat16);
    });
    EXPECT_TRUE(w.test()) << "an async call of a group is done when groupEnd returns";
    checkLastCall(comm, "allgather");  // the last one of the group
    w.wait();
    EXPECT_TRUE(matchesReduced(ar.data(), c, t, ReduceOp::Sum, n, 0)) << "allReduce in group";
    EXPECT_TRUE(matchesInput(bc.data(), c, DataType::Int64, kNoReduction, 0, 0)) << "broadcast in nested group";
    EXPECT_TRUE(matchesReduced(ar2.data(), c, DataType::Int8, ReduceOp::Min, n, 0)) << "async allReduce in group";
    for (int p = 0; p < n; ++p)
      EXPECT_TRUE(matchesInput(ag.at(static_cast<size_t>(p) * c), c, DataType::Bfloat16, kNoReduction, p, 0))
          << "allGather in group, block " << p;
  }
  // An empty group.
  grouped([] {});
}

void splitBody(Communicator& comm) {
  const int rank = comm.rank(), n = comm.size();
  // Colors by parity; keys reverse the order, so new ranks count down the old ones.
  std::vector<int> members;  // old ranks in new-rank order
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == rank % 2) members.push_back(r);
  const int expectRank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  auto sub = comm.split(rank % 2, n - rank);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(sub->rank(), expectRank);
  {
    int64_t mine = rank + 1, sum = 0;
    sub->allReduce(&mine, &sum, 1, DataType::Int64, ReduceOp::Sum);
    checkLastCall(*sub, "allreduce");
    int64_t want = 0;
    for (int r : members) want += r + 1;
    EXPECT_EQ(sum, want) << "AllReduce on the color " << rank % 2 << " communicator";
    int32_t me32 = rank;
    std::vector<int32_t> got(members.size(), -1);
    sub->allGather(&me32, got.data(), 1, DataType::Int32);
    checkLastCall(*sub, "allgather");
    EXPECT_EQ(got, std::vector<int32_t>(members.begin(), members.end())) << "AllGather of old ranks";
    // A large collective on the sub-communicator.
    checkCase(*sub, Coll::AllReduce, DataType::Float32, ReduceOp::Sum, 100003, false, 0);
  }
  // The split of a split, same color everywhere, keys keeping the order.
  {
    auto subsub = sub->split(7, 0);
    ASSERT_NE(subsub, nullptr);
    EXPECT_EQ(subsub->size(), sub->size());
    EXPECT_EQ(subsub->rank(), sub->rank());
    checkCase(*subsub, Coll::AllGather, DataType::Int32, ReduceOp::Sum, 33, true, 0);
  }
  // Odd ranks opt out.
  {
    auto evens = comm.split(rank % 2 == 0 ? 0 : COLLIE_SPLIT_NOCOLOR, rank);
    if (rank % 2 == 0) {
      ASSERT_NE(evens, nullptr);
      EXPECT_EQ(evens->size(), (n + 1) / 2);
      EXPECT_EQ(evens->rank(), rank / 2);
      evens->barrier();
      checkCase(*evens, Coll::Broadcast, DataType::Uint8, ReduceOp::Sum, 77, false, evens->size() - 1);
    } else {
      EXPECT_EQ(evens, nullptr);
    }
  }
  // The parent is unaffected.
  checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Max, 1000, true, 0);
}

void barrierBody(Communicator& comm) {
  for (int i = 0; i < 20; ++i) {
    comm.barrier();
    if (i % 5 == 0) checkCase(comm, Coll::AllReduce, DataType::Int32, ReduceOp::Sum, 3, true, 0);
  }
}

namespace {
CallCheck gCallCheck;  // set before the ranks start, read by them
}  // namespace

CheckEachCall::CheckEachCall(CallCheck check) : previous_(std::move(gCallCheck)) { gCallCheck = std::move(check); }
CheckEachCall::~CheckEachCall() { gCallCheck = std::move(previous_); }

void checkLastCall(Communicator& comm, const std::string& collective) {
  if (!gCallCheck) return;
  const CallInfo ran = comm.lastCall();
  SCOPED_TRACE("lastCall: " + ran.collective + " " + ran.algorithm + " over " + ran.transport);
  if (collective.empty()) {
    EXPECT_TRUE(ran.collective == "send" || ran.collective == "recv") << ran.collective;
  } else {
    EXPECT_EQ(ran.collective, collective);
  }
  gCallCheck(ran);
}

int rerunCurrentTestWith(const std::vector<std::string>& vars) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::vector<std::string> env = vars;
  auto replaced = [&](const std::string& var) {
    if (var.rfind("GTEST_OUTPUT=", 0) == 0) return true;  // the parent writes the report
    for (const std::string& v : vars)
      if (var.compare(0, v.find('=') + 1, v, 0, v.find('=') + 1) == 0) return true;
    return false;
  };
  for (char** e = environ; *e; ++e)
    if (!replaced(*e)) env.push_back(*e);
  std::vector<char*> envp, argv;
  for (std::string& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
  argv = {exe.data(), filter.data(), nullptr};
  fflush(stdout);
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = -1;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

void runInChildrenWith(const std::string& mark, const std::vector<std::vector<std::string>>& runs,
                       const std::function<void()>& body) {
  const std::string name = mark.substr(0, mark.find('='));
  const char* now = std::getenv(name.c_str());
  if (now && mark == name + "=" + now) {
    body();
    return;
  }
  for (const std::vector<std::string>& run : runs) {
    std::vector<std::string> env = run;
    env.push_back(mark);
    std::string named;
    for (const std::string& v : env) named += " " + v;
    const int status = rerunCurrentTestWith(env);
    ASSERT_TRUE(WIFEXITED(status)) << "the child with" << named << " did not exit (status " << status << ")";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child with" << named << " failed (its output is above)";
  }
}

void expectError(const char* what, ErrorCode code, std::vector<std::string> mentions,
                 const std::function<void()>& call) {
  SCOPED_TRACE(what);
  try {
    call();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << what << ": " << e.what();
    const std::string msg = e.what();
    for (const std::string& m : mentions) {
      EXPECT_NE(msg.find(m), std::string::npos) << what << ": the message does not mention '" << m << "': " << msg;
    }
  }
}

void badArgumentsBody(Communicator& comm) {
  const int rank = comm.rank(), n = comm.size();
  const size_t c = 64;
  const DataType t = DataType::Float32;
  const ErrorCode arg = ErrorCode::InvalidArgument, usage = ErrorCode::InvalidUsage;
  Buffer send(t, static_cast<size_t>(n) * c), recv(t, static_cast<size_t>(n) * c);
  send.fillInput(0, static_cast<size_t>(n) * c, ReduceOp::Sum, rank, 0);
  const void* s = send.data();
  void* r = recv.data();
  const auto badType = static_cast<DataType>(42);
  const auto badOp = static_cast<ReduceOp>(42);
  const size_t huge = std::numeric_limits<size_t>::max();

  expectError("allReduce sendbuff NULL", arg, {"sendbuff", "NULL"},
              [&] { comm.allReduce(nullptr, r, c, t, ReduceOp::Sum); });
  expectError("allReduce recvbuff NULL", arg, {"recvbuff", "NULL"},
              [&] { comm.allReduce(s, nullptr, c, t, ReduceOp::Sum); });
  expectError("allReduce datatype 42", arg, {"datatype", "42"},
              [&] { comm.allReduce(s, r, c, badType, ReduceOp::Sum); });
  expectError("allReduce op 42", arg, {"op", "42"}, [&] { comm.allReduce(s, r, c, t, badOp); });
  expectError("allReduce count SIZE_MAX", arg, {"count"}, [&] { comm.allReduce(s, r, huge, t, ReduceOp::Sum); });
  expectError("allGather count overflow", arg, {"count"}, [&] { comm.allGather(s, r, huge / 2, t); });
  expectError("reduceScatter op 42", arg, {"op"}, [&] { comm.reduceScatter(s, r, c, t, badOp); });
  expectError("reduce op -1", arg, {"op"}, [&] { comm.reduce(s, r, c, t, static_cast<ReduceOp>(-1), 0); });
  expectError("broadcast datatype -1", arg, {"datatype"},
              [&] { comm.broadcast(s, r, c, static_cast<DataType>(-1), 0); });
  for (int bad : {-1, n}) {
    expectError("broadcast bad root", arg, {"root", std::to_string(bad)}, [&] { comm.broadcast(s, r, c, t, bad); });
    expectError("reduce bad root", arg, {"root"}, [&] { comm.reduce(s, r, c, t, ReduceOp::Sum, bad); });
    expectError("send bad peer", arg, {"peer", std::to_string(bad)}, [&] { comm.send(s, c, t, bad); });
    const int badSource = bad == kAnySource ? -2 : bad;  // -1 is kAnySource for a receive, not a bad peer
    expectError("recv bad peer", arg, {"peer"}, [&] { comm.recv(r, c, t, badSource); });
    expectError("reduceAsync bad root", arg, {"root"}, [&] { comm.reduceAsync(s, r, c, t, ReduceOp::Sum, bad); });
  }
  expectError("send to self outside a group", usage, {"itself", "group"}, [&] { comm.send(s, c, t, rank); });
  expectError("recv from self outside a group", usage, {"itself"}, [&] { comm.recv(r, c, t, rank); });
  // In a group, so that the peer may be this rank itself when n == 1; each refusal fails its group.
  for (const bool sending : {true, false}) {
    groupStart();
    if (sending) expectError("send buffer NULL", arg, {"sendbuff"}, [&] { comm.send(nullptr, c, t, (rank + 1) % n); });
    if (!sending) expectError("recv buffer NULL", arg, {"recvbuff"}, [&] { comm.recv(nullptr, c, t, (rank + 1) % n); });
    expectError("groupEnd after a refused call", arg, {"no call was issued, since the group failed"},
                [] { groupEnd(); });
  }
  // Partial overlaps (exact in-place positions are fine; anything else is refused).
  expectError("allReduce partial overlap", arg, {"overlap"},
              [&] { comm.allReduce(recv.at(1), r, c, t, ReduceOp::Sum); });
  expectError("broadcast partial overlap", arg, {"overlap"}, [&] { comm.broadcast(r, recv.at(3), c, t, rank); });
  expectError("allGather sendbuff not at recvbuff + rank*count", arg, {"overlap", "in place"},
              [&] { comm.allGather(recv.at(rank == 0 ? 1 : 0), r, c, t); });
  expectError("reduceScatter recvbuff not at sendbuff + rank*count", arg, {"overlap"},
              [&] { comm.reduceScatter(r, recv.at(rank == 0 ? 1 : 0), c, t, ReduceOp::Sum); });
  expectError("allToAll in place", arg, {"out of place"}, [&] { comm.allToAll(r, r, c, t); });
  expectError("allReduceAsync sendbuff NULL", arg, {"sendbuff"},
              [&] { comm.allReduceAsync(nullptr, r, c, t, ReduceOp::Sum); });
  expectError("typed span too short", arg, {"recv"}, [&] {
    std::vector<float> in(8), out(4);
    comm.allReduce(std::span<const float>(in), std::span<float>(out), ReduceOp::Sum);
  });
  expectError("barrier inside a group", usage, {"group"}, [&] { grouped([&] { comm.barrier(); }); });
  expectError("split inside a group", usage, {"group"}, [&] { grouped([&] { comm.split(0, 0); }); });
  expectError("split color -5", arg, {"color"}, [&] { comm.split(-5, 0); });
  expectError("groupEnd without groupStart", usage, {"groupStart"}, [] { groupEnd(); });
  EXPECT_TRUE(isSentinel(r, static_cast<size_t>(n) * c, t)) << "a refused call wrote recvbuff";
  EXPECT_TRUE(recv.guardsIntact());
  EXPECT_TRUE(matchesInput(s, static_cast<size_t>(n) * c, t, ReduceOp::Sum, rank, 0));

  // A refused call inside a group fails the group, as in NCCL: the good call queued after it does not run either, and
  // the next group does.
  groupStart();
  expectError("allReduce NULL in a group", arg, {"sendbuff"}, [&] { comm.allReduce(nullptr, r, c, t, ReduceOp::Sum); });
  comm.allReduce(s, r, c, t, ReduceOp::Sum);
  expectError("groupEnd after a refused call", arg, {"none of the group's 1 calls"}, [] { groupEnd(); });
  EXPECT_TRUE(isSentinel(r, static_cast<size_t>(n) * c, t)) << "a refused group wrote recvbuff";
  grouped([&] { comm.allReduce(s, r, c, t, ReduceOp::Sum); });
  EXPECT_TRUE(matchesReduced(r, c, t, ReduceOp::Sum, n, 0)) << "the group after a refused one";
  // count 0 needs no buffers.
  comm.allReduce(nullptr, nullptr, 0, t, ReduceOp::Sum);
  comm.broadcast(nullptr, nullptr, 0, t, 0);
  // The communicator still works.
  EXPECT_EQ(comm.asyncError(), ErrorCode::Success);
  checkCase(comm, Coll::AllReduce, DataType::Int64, ReduceOp::Sum, 1000, false, 0);
  checkCase(comm, Coll::Reduce, DataType::Float16, ReduceOp::Max, 1000, false, n - 1);
}

void twoSameNamedSplitsBody(Communicator& comm, const std::string& name) {
  Options o;
  o.name = name;
  auto first = comm.split(0, comm.rank(), o);
  auto second = comm.split(0, comm.rank(), o);
  ASSERT_TRUE(first && second);
  std::vector<int32_t> v(8, 1);
  for (int i = 0; i < 2; ++i) first->allReduce(v.data(), v.data(), v.size(), DataType::Int32, ReduceOp::Sum);
  for (int i = 0; i < 3; ++i) second->allReduce(v.data(), v.data(), v.size(), DataType::Int32, ReduceOp::Sum);
  int32_t expected = 1;  // each of the 5 in-place sums multiplies every element by the number of ranks
  for (int i = 0; i < 5; ++i) expected *= comm.size();
  for (int32_t x : v) EXPECT_EQ(x, expected);
}

}  // namespace collie::test
