// A directory of contact cards (COLLIE_PEER_CARDS=directory, core/card_directory.hpp) with every rank a forked process:
// a lookup goes around holders that were SIGKILLed (rank 0 and its left child, the top of the tree), climbing from
// the asking rank's own ancestors, and a card that no live rank holds fails the call quickly with RemoteError naming
// it; ranks whose COLLIE_PEER_CARDS differ fail init on every rank. Each test runs in a child of this binary with the
// variable set (it is read once per process), over shm and over tcp.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"
#include "core/bootstrap_plan.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 16;
constexpr int64_t kMs = 1000000;
constexpr auto kTimeout = 20s;
constexpr int64_t kQuickNs = 5000 * kMs;  // well under the timeout

enum Counter { kKilledNs = 0, kReady = 1 };
enum PerRank { kDone = 0, kAfterNs = 1 };

/// Runs `body` in a child of this binary with COLLIE_PEER_CARDS=directory, over shm and over tcp.
void underDirectory(const std::function<void()>& body) {
  runInChildrenWith("COLLIE_PEER_CARDS=directory", {{}, {"COLLIE_SHM_DISABLE=1"}}, body);
}

/// The ranks of `holder`'s subtree in init's tree.
std::vector<int> subtreeOf(int holder, int n) {
  const core::TreePlace t = core::treePlace(holder, n);
  std::vector<int> out;
  for (int i = 0; i < t.size; ++i) out.push_back((t.first + i) % n);
  return out;
}

TEST(CardDirectoryProc, LookupsGoAroundKilledHoldersAndACardNoLiveRankHoldsFailsQuickly) {
  underDirectory([] {
    const core::TreePlace top = core::treePlace(0, kRanks);
    const int left = top.left, right = top.right;
    const int deep = core::treePlace(left, kRanks).left;  // a subtree below the dead ones: its pairs must still meet
    const std::vector<int> group = subtreeOf(deep, kRanks);
    ASSERT_GE(group.size(), 3u);
    const int stranded = group.back();  // in the left half: only rank 0 and `left` hold its card for `right`
    ProcessLauncher launcher(kRanks, lazyOptions("cards-killed", kTimeout));
    SharedArea& sh = launcher.shared();
    launcher.start([&](Communicator& comm) {
      const int r = comm.rank();
      sh.counters[kReady].fetch_add(1);
      if (r == 0 || r == left) {
        std::this_thread::sleep_for(60s);  // killed long before
        return;
      }
      ASSERT_TRUE(waitForCount(sh.counters[kKilledNs], 1, 60s)) << "the parent never killed ranks 0 and " << left;
      if (std::find(group.begin(), group.end(), r) != group.end()) {
        // Every pair of the group: a card of a group member is held by its ancestors in the group, which the ranks
        // below reach by asking their own ancestors (the top's holders are dead).
        std::vector<std::vector<int32_t>> in(group.size(), std::vector<int32_t>(300, -1));
        std::vector<int32_t> out(300);
        for (size_t i = 0; i < out.size(); ++i) out[i] = r * 1000 + static_cast<int32_t>(i);
        groupStart();
        for (size_t k = 0; k < group.size(); ++k) {
          if (group[k] == r) continue;
          comm.send(out.data(), out.size(), DataType::Int32, group[k]);
          comm.recv(in[k].data(), in[k].size(), DataType::Int32, group[k]);
        }
        groupEnd();
        for (size_t k = 0; k < group.size(); ++k) {
          for (size_t i = 0; group[k] != r && i < in[k].size(); ++i)
            ASSERT_EQ(in[k][i], group[k] * 1000 + static_cast<int32_t>(i)) << "from rank " << group[k] << " at " << i;
        }
        sh.perRank[r][kDone].store(1);
      } else if (r == right) {
        std::vector<int32_t> out(10, r);
        try {
          comm.send(out.data(), out.size(), DataType::Int32, stranded);
          ADD_FAILURE() << "rank " << r << " reached rank " << stranded << " with every holder of its card dead";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
          EXPECT_NE(std::string(e.what()).find("contact card"), std::string::npos) << e.what();
          sh.perRank[r][kDone].store(1);
        }
      }
      sh.perRank[r][kAfterNs].store(monotonicNs() - sh.counters[kKilledNs].load());
    });
    ASSERT_TRUE(waitForCount(sh.counters[kReady], kRanks, 60s)) << "the ranks did not initialise";
    launcher.kill(0, SIGKILL);
    launcher.kill(left, SIGKILL);
    std::this_thread::sleep_for(50ms);  // the kernel closes their sockets
    sh.counters[kKilledNs].store(monotonicNs());
    auto exits = launcher.wait(60s);
    for (int r = 0; r < kRanks; ++r) {
      if (r == 0 || r == left) continue;
      EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
      EXPECT_FALSE(exits[r].killedAtDeadline) << "rank " << r << " hung";
      EXPECT_LT(sh.perRank[r][kAfterNs].load(), kQuickNs) << "rank " << r;
      if (r == right || std::find(group.begin(), group.end(), r) != group.end()) {
        EXPECT_EQ(sh.perRank[r][kDone].load(), 1) << "rank " << r;
      }
    }
  });
}

// COLLIE_PEER_CARDS changes what the root answers and what the all-gather carries: ranks that differ fail init, each
// with the setting named, quickly.
TEST(CardDirectoryProc, RanksWhosePeerCardsSettingDiffersFailInit) {
  underDirectory([] {
    ProcessLauncher launcher(4, lazyOptions("cards-settings", kTimeout));
    launcher.setEnv(3, "COLLIE_PEER_CARDS", "all");
    launcher.start([](Communicator& comm) { ADD_FAILURE() << "rank " << comm.rank() << " initialised"; });
    auto exits = launcher.wait(60s);
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(exits[r].exited && exits[r].exitCode == kChildInitFailure) << exits[r].describe();
      EXPECT_LT(exits[r].seconds, kQuickNs / 1e9) << exits[r].describe();
    }
  });
}

}  // namespace
}  // namespace collie::test
