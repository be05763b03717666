// Send/Recv under connections on first use (COLLIE_CONNECT=lazy), with every rank a thread: the patterns whose two
// ends are different calls, which only a rank that dials whatever its rank and a peer that answers whatever it is
// doing can complete (src/transport/dialer.hpp):
//   - a ring shift of send(r + 1) then recv(r - 1) outside a group, 2 to 8 ranks (2 ranks: both dial at once);
//   - send then barrier against barrier then recv;
//   - every rank sending to every other at once (every pair dialled from both ends at the same time);
//   - seven ranks dialling one that is busy outside collie;
//   - a send on one communicator against a barrier on another (the receiver is blocked in the other one).
// Every element received is checked. Each runs over shm (threads of one process) and again in a child process of
// this binary over tcp (COLLIE_SHM_DISABLE=1, read once per process). The same patterns with forked ranks are in
// tests/multiproc/test_lazy_sendrecv_proc.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options lazy(const char* name) { return lazyOptions(name, 30s); }

/// What rank `from` sends to rank `to`: 257 values that say who sent them to whom.
std::vector<int32_t> payload(int from, int to) {
  std::vector<int32_t> v(257);
  for (size_t i = 0; i < v.size(); ++i) v[i] = from * 100000 + to * 1000 + static_cast<int32_t>(i);
  return v;
}

void expectFrom(const std::vector<int32_t>& got, int from, int to) {
  const std::vector<int32_t> want = payload(from, to);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "rank " << to << " from " << from << " [" << i << "]";
}

/// Runs `test` here over shm, and in a child of this binary over tcp.
void overShmAndTcp(const std::function<void()>& test) {
  if (std::getenv("COLLIE_SHM_DISABLE") != nullptr) {
    test();  // the child: tcp
    return;
  }
  test();
  const int status = rerunCurrentTestWith({"COLLIE_SHM_DISABLE=1"});
  ASSERT_TRUE(WIFEXITED(status)) << "the child run over tcp did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run over tcp failed (its output is above)";
}

TEST(LazySendRecv, RingShiftOfSendThenRecvOutsideAGroup) {
  overShmAndTcp([] {
    for (int n : {2, 3, 5, 8}) {
      SCOPED_TRACE(std::to_string(n) + " ranks");
      ThreadLauncher::run(
          n,
          [](Communicator& comm) {
            const int r = comm.rank(), n = comm.size();
            const int next = (r + 1) % n, prev = (r + n - 1) % n;
            for (int round = 0; round < 2; ++round) {  // the second round runs on the connections of the first
              std::vector<int32_t> out = payload(r, next), in(out.size(), -1);
              comm.send(out.data(), out.size(), DataType::Int32, next);
              comm.recv(in.data(), in.size(), DataType::Int32, prev);
              expectFrom(in, prev, r);
            }
          },
          lazy("ring-shift"));
    }
  });
}

// Ranks 2 and 0 are not ring neighbours, so the barrier (a ring AllReduce) never uses their link: a pair has one
// ordered channel, and a barrier message behind the send on it would be a mismatch under eager connection too.
TEST(LazySendRecv, SendThenBarrierAgainstBarrierThenRecv) {
  overShmAndTcp([] {
    ForcedAlgorithm ring("ring");
    ThreadLauncher::run(
        4,
        [](Communicator& comm) {
          const int r = comm.rank();
          if (r == 2) {  // the higher rank sends: the lower one has not dialled it and is in the barrier
            std::vector<int32_t> out = payload(2, 0);
            comm.send(out.data(), out.size(), DataType::Int32, 0);
            comm.barrier();
          } else if (r == 0) {
            comm.barrier();
            std::vector<int32_t> in(257, -1);
            comm.recv(in.data(), in.size(), DataType::Int32, 2);
            expectFrom(in, 2, 0);
          } else {
            comm.barrier();
          }
        },
        lazy("send-barrier"));
  });
}

TEST(LazySendRecv, EveryPairDialledFromBothEndsAtOnce) {
  overShmAndTcp([] {
    for (int round = 0; round < 3; ++round) {  // fresh communicators: every round's dials race anew
      ThreadLauncher::run(
          4,
          [](Communicator& comm) {
            const int r = comm.rank(), n = comm.size();
            for (int k = 1; k < n; ++k) {
              const int to = (r + k) % n;
              std::vector<int32_t> out = payload(r, to);
              comm.send(out.data(), out.size(), DataType::Int32, to);
            }
            for (int k = 1; k < n; ++k) {
              const int from = (r + n - k) % n;
              std::vector<int32_t> in(257, -1);
              comm.recv(in.data(), in.size(), DataType::Int32, from);
              expectFrom(in, from, r);
            }
            EXPECT_EQ(comm.connectedPeers(), n - 1) << "rank " << r;
          },
          lazy("both-ends"));
    }
  });
}

TEST(LazySendRecv, ManyRanksDialOneThatIsBusyElsewhere) {
  overShmAndTcp([] {
    ThreadLauncher::run(
        8,
        [](Communicator& comm) {
          const int r = comm.rank(), n = comm.size();
          if (r == 0) {
            std::this_thread::sleep_for(300ms);  // busy outside collie while the others dial and send
            for (int from = n - 1; from >= 1; --from) {
              std::vector<int32_t> in(257, -1);
              comm.recv(in.data(), in.size(), DataType::Int32, from);
              expectFrom(in, from, 0);
            }
            EXPECT_EQ(comm.connectedPeers(), n - 1);
          } else {
            std::vector<int32_t> out = payload(r, 0);
            comm.send(out.data(), out.size(), DataType::Int32, 0);
          }
        },
        lazy("many-to-one"));
  });
}

TEST(LazySendRecv, SendAgainstABarrierOnAnotherCommunicator) {
  overShmAndTcp([] {
    ThreadLauncher::run(
        3,
        [](Communicator& comm) {
          auto other = comm.split(0, comm.rank());
          ASSERT_NE(other, nullptr);
          const int r = comm.rank();
          if (r == 2) {  // the receiver is blocked in the other communicator's barrier until this send returns
            std::vector<int32_t> out = payload(2, 0);
            comm.send(out.data(), out.size(), DataType::Int32, 0);
            other->barrier();
          } else if (r == 0) {
            other->barrier();
            std::vector<int32_t> in(257, -1);
            comm.recv(in.data(), in.size(), DataType::Int32, 2);
            expectFrom(in, 2, 0);
          } else {
            other->barrier();
          }
        },
        lazy("two-comms"));
  });
}

// Communicators made by shrink keep their parent's listeners: the parent and two shrunk ones dial over the same
// sockets at once (a ring shift on each, started in a different order on every rank), and each takes only the dials
// of its own members (the accept loop routes a hello by its secret); every element is checked.
TEST(LazySendRecv, ShrunkCommunicatorsOnOneListenerTakeOnlyTheirOwnDials) {
  overShmAndTcp([] {
    ThreadLauncher::run(
        4,
        [](Communicator& comm) {
          std::vector<int> none;
          auto first = comm.shrink(none);
          auto second = comm.shrink(none);
          ASSERT_NE(first, nullptr);
          ASSERT_NE(second, nullptr);
          Communicator* comms[] = {&comm, first.get(), second.get()};
          const int r = comm.rank(), n = comm.size();
          const int next = (r + 1) % n, prev = (r + n - 1) % n;
          for (int k = 0; k < 3; ++k) {
            Communicator& c = *comms[(r + k) % 3];
            std::vector<int32_t> out = payload(r + 10 * ((r + k) % 3), next);
            c.send(out.data(), out.size(), DataType::Int32, next);
          }
          for (int k = 0; k < 3; ++k) {
            const int which = (prev + k) % 3;  // the order prev sent in
            std::vector<int32_t> in(257, -1);
            comms[which]->recv(in.data(), in.size(), DataType::Int32, prev);
            expectFrom(in, prev + 10 * which, r);
          }
        },
        lazy("shrunk"));
  });
}

// The default is connection on first use (with the COLLIE_CONNECT of this environment unset): init connects the
// peers of the table's all-gather and the ring's neighbours, not the full mesh, and a ring shift of sends then
// receives outside a group completes.
TEST(LazySendRecv, TheDefaultIsLazyAndARingShiftCompletes) {
  if (std::getenv("COLLIE_CONNECT") != nullptr) GTEST_SKIP() << "COLLIE_CONNECT is set in this environment";
  Options o = lazy("default");
  o.connect = ConnectMode::Default;
  ForcedAlgorithm ring("ring");  // init's calls then need the ring neighbours only
  ThreadLauncher::run(
      8,
      [](Communicator& comm) {
        EXPECT_LT(comm.connectedPeers(), comm.size() - 1) << "rank " << comm.rank() << ": a full mesh after init";
        const int r = comm.rank(), n = comm.size();
        std::vector<int32_t> out = payload(r, (r + 1) % n), in(out.size(), -1);
        comm.send(out.data(), out.size(), DataType::Int32, (r + 1) % n);
        comm.recv(in.data(), in.size(), DataType::Int32, (r + n - 1) % n);
        expectFrom(in, (r + n - 1) % n, r);
      },
      o);
}

TEST(LazySendRecv, DialingAPeerWhoseCommunicatorIsGoneFailsAtOnce) {
  // Rank 3 of 9 is not among rank 0's init partners (halving-doubling: 1, 2, 4 and the folded 8); it is destroyed,
  // and rank 0's first send to it dials an address where nothing listens any more: RemoteError naming rank 3 well
  // within the 20 s timeout, over shm and over tcp (whose refused dials used to be retried until the timeout).
  overShmAndTcp([] {
    Options o = lazy("gone");
    o.timeout = 20s;
    auto comms = Communicator::createAll(9, o);
    comms[3].reset();
    std::vector<int32_t> out(10, 7);
    const auto start = std::chrono::steady_clock::now();
    try {
      comms[0]->send(out.data(), out.size(), DataType::Int32, 3);
      ADD_FAILURE() << "a send to a destroyed rank returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    for (auto& c : comms)
      if (c) c->abort();
  });
}

TEST(LazySendRecv, ADialTurnedDownByAPeerThatFailedOnAMismatchReportsTheMismatch) {
  // Rank 3 of 9 fails on mismatched calls with rank 2 (a Send of int32 against a Recv of float). Rank 0, never
  // connected to rank 3 (dialer.hpp), then sends to it: its dial is turned down, and the refusal carries the
  // mismatch, so rank 0 reports the same mismatch (InvalidUsage naming both calls), not that rank 3 "failed".
  overShmAndTcp([] {
    Options o = lazy("refused");
    o.timeout = 20s;
    ThreadRanks comms(Communicator::createAll(9, o));
    std::vector<int32_t> out(10, 7);
    std::vector<float> in(10);
    std::thread sender([&] {
      try {
        comms[2]->send(out.data(), out.size(), DataType::Int32, 3);
      } catch (const Error&) {  // may complete before rank 3 looks, or fail with the mismatch
      }
    });
    try {
      comms[3]->recv(in.data(), in.size(), DataType::Float32, 2);
      ADD_FAILURE() << "a receive of float from a send of int32 returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
    }
    sender.join();
    try {
      comms[0]->send(out.data(), out.size(), DataType::Int32, 3);
      ADD_FAILURE() << "a send to a rank whose communicator failed returned";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << what;
      EXPECT_NE(what.find("mismatched calls"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 2 called Send"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 3 called Recv"), std::string::npos) << what;
    }
    for (auto& c : comms) c->abort();
  });
}

}  // namespace
}  // namespace collie::test
