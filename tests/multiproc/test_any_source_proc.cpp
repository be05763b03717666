// Receive from any source (Communicator::recvAny, recvAnyAsync, recv with kAnySource), every rank a forked process,
// over shm and over tcp: several senders, each one's messages in its order, contents checked element by element; the
// pair's numbering staying in step with named calls afterwards; a peer ahead in a collective not taken; the timeout
// naming the ranks waited on; a killed sender dropped (the others still served; RemoteError once none is left); a
// size that differs from the sender's giving a mismatch on both ranks; empty messages; bad uses refused.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

// A receive from any rank needs every peer connected: these communicators connect eagerly.
Options eagerOptions() {
  Options o;
  o.connect = ConnectMode::Eager;
  return o;
}

using namespace std::chrono_literals;

struct Net {
  const char* name;
  bool tcp;
};

class AnySource : public ::testing::TestWithParam<Net> {
 protected:
  // Ranks forked inside the test inherit it: tcp between every pair, or shm (the default on one host).
  ScopedEnv shm_{GetParam().tcp ? "COLLIE_SHM_DISABLE" : nullptr, "1"};
};

// Element j of message i from `sender`: a value no other message has.
float valueOf(int sender, int i, size_t j) {
  return static_cast<float>(sender * 100000 + i * 1000 + static_cast<int>(j % 1000));
}

std::vector<float> messageOf(int sender, int i, size_t count) {
  std::vector<float> m(count);
  for (size_t j = 0; j < count; ++j) m[j] = valueOf(sender, i, j);
  return m;
}

// Checks a received message element by element; returns its number (i) so that the caller can check the order.
int checkMessage(const std::vector<float>& got, int sender, size_t count) {
  const int i = static_cast<int>(got[0] - static_cast<float>(sender * 100000)) / 1000;
  for (size_t j = 0; j < count; ++j) {
    if (got[j] != valueOf(sender, i, j)) {
      ADD_FAILURE() << "message from rank " << sender << ": element " << j << " is " << got[j] << ", expected "
                    << valueOf(sender, i, j);
      break;
    }
  }
  return i;
}

// Ranks 1..n-1 each send kPerSender messages to rank 0, which takes them all from any source (half blocking,
// half async), checks each one and that every sender's come in the order sent; then named calls both ways and an
// AllReduce, which succeed only if every pair's numbering stayed in step.
void severalSenders(Communicator& comm, size_t count, const char* transport) {
  constexpr int kPerSender = 6;
  const int n = comm.size(), r = comm.rank();
  if (r != 0) {
    for (int i = 0; i < kPerSender; ++i) comm.send(messageOf(r, i, count).data(), count, DataType::Float32, 0);
  } else {
    std::vector<int> next(static_cast<size_t>(n), 0);  // by sender: the number of its next message
    std::vector<float> buf(count);
    for (int k = 0; k < (n - 1) * kPerSender; ++k) {
      std::fill(buf.begin(), buf.end(), -1.0f);
      int from;
      if (k % 2 == 0) {
        from = comm.recvAny(buf.data(), count, DataType::Float32);
      } else {
        Work w = comm.recvAnyAsync(buf.data(), count, DataType::Float32);
        w.wait();
        from = w.source();
      }
      ASSERT_GE(from, 1);
      ASSERT_LT(from, n);
      EXPECT_EQ(checkMessage(buf, from, count), next[static_cast<size_t>(from)]++) << "out of order from " << from;
    }
    for (int p = 1; p < n; ++p) EXPECT_EQ(next[static_cast<size_t>(p)], kPerSender) << "from rank " << p;
    EXPECT_EQ(comm.lastCall().transport, transport);
  }
  // Named calls after (once rank 0 took them all: a later send could otherwise be its match, legitimately): rank 0
  // receives one more from each by name, and sends each one back.
  comm.barrier();
  for (int p = 1; p < n; ++p) {
    if (r == p) {
      comm.send(messageOf(r, kPerSender, count).data(), count, DataType::Float32, 0);
      std::vector<float> back(count);
      comm.recv(back.data(), count, DataType::Float32, 0);
      EXPECT_EQ(checkMessage(back, 0, count), p);
    } else if (r == 0) {
      std::vector<float> got(count);
      comm.recv(got.data(), count, DataType::Float32, p);
      EXPECT_EQ(checkMessage(got, p, count), kPerSender);
      comm.send(messageOf(0, p, count).data(), count, DataType::Float32, p);
    }
  }
  double x = r + 1;
  comm.allReduce(&x, &x, 1, DataType::Float64, ReduceOp::Sum);
  EXPECT_EQ(x, n * (n + 1) / 2.0);
}

TEST_P(AnySource, SeveralSendersSmallMessages) {
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(
      4, [name = GetParam().name](Communicator& c) { severalSenders(c, 7, name); }, eagerOptions())));
}

TEST_P(AnySource, SeveralSendersLargeMessages) {
  // 4 MiB: striped over tcp's sockets, many slots (or one read by address) over shm.
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(
      3, [name = GetParam().name](Communicator& c) { severalSenders(c, 1 << 20, name); }, eagerOptions())));
}

// Rank 2 is in an AllReduce (its messages reach rank 0 first, or not) while rank 0 waits for rank 1's send: rank 0
// must take rank 1's message, never rank 2's collective one.
TEST_P(AnySource, APeerAheadInACollectiveIsNotTaken) {
  ProcessLauncher launcher(3, eagerOptions());
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    std::vector<double> v(1000, r + 1.0);
    if (r == 0) {
      std::vector<float> buf(5);
      EXPECT_EQ(comm.recvAny(buf.data(), 5, DataType::Float32), 1);
      EXPECT_EQ(checkMessage(buf, 1, 5), 0);
    } else if (r == 1) {
      waitForCount(sh.counters[0], 1, 20s);  // rank 2 entered its AllReduce first
      comm.send(messageOf(1, 0, 5).data(), 5, DataType::Float32, 0);
    } else {
      sh.counters[0].store(1);
    }
    comm.allReduce(v.data(), v.data(), v.size(), DataType::Float64, ReduceOp::Sum);
    for (double e : v) ASSERT_EQ(e, 6.0);
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
}

// Nobody sends: rank 0 times out naming the receive and both ranks it waited on, near its timeout.
TEST_P(AnySource, TimeoutNamesTheRanksWaitedOn) {
  Options options = eagerOptions();
  options.timeout = 1500ms;
  ProcessLauncher launcher(3, options);
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    if (comm.rank() != 0) {  // stay alive (and silent) until rank 0 has its answer
      waitForCount(sh.counters[0], 1, 30s);
      return;
    }
    float buf[4];
    const int64_t start = monotonicNs();
    try {
      comm.recvAny(buf, 4, DataType::Float32);
      ADD_FAILURE() << "recvAny returned with no sender";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::Timeout) << m;
      EXPECT_NE(m.find("Recv(float32, 4 from any rank)"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1 ("), std::string::npos) << m;
      EXPECT_NE(m.find("rank 2 ("), std::string::npos) << m;
      const int64_t ms = (monotonicNs() - start) / 1000000;
      EXPECT_GE(ms, 1400) << m;
      EXPECT_LT(ms, 10000) << m;
    }
    sh.counters[0].store(1);
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
}

// Rank 1 is killed while rank 0 waits: rank 0 drops it and still takes rank 2's message (sent after the kill);
// once rank 2 has gone too, the next receive from any source fails at once naming both, long before the timeout.
TEST_P(AnySource, AKilledSenderIsDroppedAndTheLastOneGoneFails) {
  Options options = eagerOptions();
  options.timeout = 30s;
  ProcessLauncher launcher(3, options);
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    auto waitFor = [&](int c) { waitForCount(sh.counters[c], 1, 30s); };
    if (r == 1) {
      sh.counters[0].store(1);  // ready to be killed
      waitFor(5);               // never set: the parent kills this rank
    } else if (r == 2) {
      waitFor(1);  // rank 1 is dead
      comm.send(messageOf(2, 0, 3).data(), 3, DataType::Float32, 0);
      // Returns: the communicator is destroyed, which closes the connections.
    } else {
      std::vector<float> buf(3);
      EXPECT_EQ(comm.recvAny(buf.data(), 3, DataType::Float32), 2);
      EXPECT_EQ(checkMessage(buf, 2, 3), 0);
      const int64_t start = monotonicNs();
      try {
        comm.recvAny(buf.data(), 3, DataType::Float32);
        ADD_FAILURE() << "recvAny returned with every sender gone";
      } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_EQ(e.code(), ErrorCode::RemoteError) << m;
        EXPECT_NE(m.find("every rank it could come from has closed"), std::string::npos) << m;
        EXPECT_NE(m.find("rank 1: "), std::string::npos) << m;
        EXPECT_NE(m.find("rank 2: "), std::string::npos) << m;
        EXPECT_LT(monotonicNs() - start, 10'000'000'000) << m;
      }
    }
  });
  waitForCount(sh.counters[0], 1, 30s);
  launcher.kill(1, SIGKILL);
  std::this_thread::sleep_for(1ms);
  sh.counters[1].store(1);
  auto exits = launcher.wait(60s);
  EXPECT_EQ(exits[1].signal, SIGKILL) << exits[1].describe();
  EXPECT_TRUE(exits[0].ok()) << exits[0].describe();
  EXPECT_TRUE(exits[2].ok()) << exits[2].describe();
}

// Runs `calls` on both ranks of a 2-rank job (connected eagerly, calls waiting 20 s at most), then an AllReduce (a
// rank whose part of `calls` completed learns in its next call), and expects each rank to fail within 10 s with
// InvalidUsage naming both `one` and `other`.
void expectMismatchOnBothRanks(void (*calls)(Communicator&), const char* one, const char* other) {
  Options options = eagerOptions();
  options.timeout = 20s;
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(
      2,
      [calls, one, other](Communicator& comm) {
        const int64_t start = monotonicNs();
        try {
          calls(comm);
          double x = 1;
          comm.allReduce(&x, &x, 1, DataType::Float64, ReduceOp::Sum);
          ADD_FAILURE() << "no error on rank " << comm.rank();
        } catch (const Error& e) {
          const std::string m = e.what();
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << m;
          EXPECT_NE(m.find(one), std::string::npos) << m;
          EXPECT_NE(m.find(other), std::string::npos) << m;
          EXPECT_LT(monotonicNs() - start, 10'000'000'000) << m;
        }
      },
      options)));
}

// Rank 1 sends 10 floats, rank 0 takes from any source into 20: both ranks report the mismatch, naming both calls.
TEST_P(AnySource, ASizeThatDiffersFromTheSendersIsAMismatchOnBothRanks) {
  expectMismatchOnBothRanks(
      [](Communicator& comm) {
        std::vector<float> buf(20, 1.0f);
        if (comm.rank() == 0) {
          comm.recvAny(buf.data(), 20, DataType::Float32);
        } else {
          comm.send(buf.data(), 10, DataType::Float32, 0);
        }
      },
      "Send(float32, 10 to rank 0)", "Recv(float32, 20 from rank 1)");
}

// A send of 0 elements is a message (of 0 bytes), as in NCCL and MPI: a receive from any source takes it and names
// its sender, and a named receive of another count is a mismatch on both ranks. Before 2026-11-30 it sent nothing, so
// the receives from any source waited for the timeout, found by the random programs (test_random_programs.cpp).
TEST_P(AnySource, EmptyMessagesAreTakenAndNamed) {
  Options options = eagerOptions();
  options.timeout = 20s;  // before, the receives from any source waited for it
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(
      4,
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        if (r != 0) {
          comm.send(nullptr, 0, DataType::Float32, 0);
        } else {
          std::vector<int> seen(static_cast<size_t>(n), 0);
          for (int k = 1; k < n; ++k) {
            const int from = k % 2 ? comm.recvAny(nullptr, 0, DataType::Float32) : [&] {
              Work w = comm.recvAnyAsync(nullptr, 0, DataType::Float32);
              w.wait();
              return w.source();
            }();
            ASSERT_TRUE(from >= 1 && from < n) << from;
            ++seen[static_cast<size_t>(from)];
          }
          for (int p = 1; p < n; ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], 1) << "empty messages from rank " << p;
        }
        // Then (once rank 0 took them all: a later send could otherwise be its match) one more from each, by name.
        comm.barrier();
        if (r != 0) {
          comm.send(messageOf(r, 1, 5).data(), 5, DataType::Float32, 0);
        } else {
          for (int p = 1; p < n; ++p) {
            std::vector<float> got(5);
            comm.recv(got.data(), 5, DataType::Float32, p);
            EXPECT_EQ(checkMessage(got, p, 5), 1);
          }
        }
        comm.barrier();
        // Empty messages between named ends keep the pairs' numbering in step.
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        groupStart();
        comm.send(nullptr, 0, DataType::Int8, next);
        comm.recv(nullptr, 0, DataType::Int8, prev);
        groupEnd();
        const std::vector<float> mine = messageOf(r, 2, 3);  // alive until the group's end, which sends it
        std::vector<float> got(3);
        groupStart();
        comm.send(mine.data(), 3, DataType::Float32, next);
        comm.recv(got.data(), 3, DataType::Float32, prev);
        groupEnd();
        EXPECT_EQ(checkMessage(got, prev, 3), 2);
      },
      options)));
}

TEST_P(AnySource, AnEmptySendAgainstANamedReceiveOfMoreIsAMismatchOnBothRanks) {
  expectMismatchOnBothRanks(
      [](Communicator& comm) {
        std::vector<float> buf(5, 1.0f);
        if (comm.rank() == 0) {
          comm.recv(buf.data(), 5, DataType::Float32, 1);
        } else {
          comm.send(nullptr, 0, DataType::Float32, 0);
          comm.send(buf.data(), 5, DataType::Float32, 0);  // before, rank 0's receive waited for this one
        }
      },
      "Send(float32, 0 to rank 0)", "Recv(float32, 5 from rank 1)");
}

// Both ranks call a Broadcast as its root (each sends, neither receives, both return), then rank 1 receives from any
// source: the next message from rank 0 is rank 0's Broadcast, a call rank 1 made with another root. That is the
// mismatch, reported on both ranks, not a peer ahead to wait for. Before 2026-11-30 rank 1 waited for the timeout
// (found by the random programs, tests/threaded/test_random_programs.cpp).
TEST_P(AnySource, AMessageFromACallThisRankMadeDifferentlyIsAMismatchNotAPeerAhead) {
  expectMismatchOnBothRanks(
      [](Communicator& comm) {
        std::vector<float> data(16, 1.0f);
        comm.broadcast(data.data(), data.data(), 16, DataType::Float32, comm.rank());
        if (comm.rank() == 1) {
          comm.recvAny(data.data(), 4, DataType::Float32);
        } else {
          comm.send(data.data(), 4, DataType::Float32, 1);
        }
      },
      "Broadcast(float32, 16, root 0)", "Broadcast(float32, 16, root 1)");
}

TEST_P(AnySource, BadUsesAreRefusedAndLeaveTheCommunicatorUsable) {
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(2, [](Communicator& comm) {
    float buf[2] = {0, 0};
    if (comm.rank() == 0) {
      groupStart();
      try {
        comm.recv(buf, 2, DataType::Float32, kAnySource);
        ADD_FAILURE() << "a receive from any source was accepted in a group";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
        EXPECT_NE(std::string(e.what()).find("cannot be part of a group"), std::string::npos) << e.what();
      }
      EXPECT_THROW(groupEnd(), Error);                                // the refused call failed the group
      EXPECT_THROW(comm.recv(buf, 2, DataType::Float32, -2), Error);  // not a rank, not kAnySource
      comm.recv(buf, 2, DataType::Float32, kAnySource);               // still usable; recv takes kAnySource too
      EXPECT_EQ(buf[0], 7.0f);
    } else {
      buf[0] = 7;
      comm.send(buf, 2, DataType::Float32, 0);
    }
  })));
}

// Connections made on first use (ConnectMode::Lazy): the first receive from any source dials every peer not
// connected yet (the senders answer whatever they are doing) and takes each sender's message, every element checked.
TEST_P(AnySource, OnFirstUseConnectionsTheFirstReceiveConnectsEveryPeer) {
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(
      3,
      [](Communicator& comm) {
        const int r = comm.rank();
        if (r != 0) {
          comm.send(messageOf(r, 0, 4).data(), 4, DataType::Float32, 0);
        } else {
          std::vector<int> left{1, 2};
          for (int k = 0; k < 2; ++k) {
            std::vector<float> buf(4);
            const int from = comm.recvAny(buf.data(), 4, DataType::Float32);
            EXPECT_EQ(comm.connectedPeers(), 2) << "after a receive from any source";
            EXPECT_EQ(checkMessage(buf, from, 4), 0);
            auto it = std::find(left.begin(), left.end(), from);
            ASSERT_NE(it, left.end()) << "rank " << from << " twice";
            left.erase(it);
          }
        }
        comm.barrier();
      },
      lazyOptions())));
}

INSTANTIATE_TEST_SUITE_P(Proc, AnySource, ::testing::Values(Net{"shm", false}, Net{"tcp", true}),
                         [](const ::testing::TestParamInfo<Net>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace collie::test
