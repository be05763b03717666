// split_scale: what Communicator::split costs, with every rank a thread of this process (Communicator::createAll).
// For each rank count it makes the parent, runs one AllReduce on it (so that its lazy connections exist, as in a
// job that splits after some work), then splits it in two by parity (keys reversed) and reports: the wall time of
// the split (all ranks), the descriptors per rank the child added at the split and after one AllReduce on it
// (verified element by element), and what is left after the child is destroyed (should be 0). The transport is
// whatever the environment selects (COLLIE_SHM_DISABLE=1 for tcp). Only the public API is used, so the same file
// builds against an older collie for a before/after table (perf/RESULTS.md).
//
//   split_scale --ranks 8,64 [--count 1024] [--repeat 3] [--share]
// --share splits with Options::shareConnections: the children use the parent's connections (the first round's
// children connect the pairs the parent lacked, for both; later rounds find them).
// prints one line per rank count: ranks, split ms (median of --repeat), child fds/rank after split, after an
// AllReduce, and left after destroying the child; the children's first AllReduce (which connects them) and second
// (ms, both colors one after the other).
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <collie/collie.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "scale_common.hpp"

namespace {

using collie_perf::openDescriptors;
using collie_perf::parseList;
using collie_perf::printEnvironment;
using collie_perf::seconds;

/// Runs fn(r) on one thread per rank; false (and prints) when any threw.
bool onEveryRank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  bool ok = true;
  for (int r = 0; r < n; ++r)
    if (!errors[static_cast<size_t>(r)].empty()) {
      fprintf(stderr, "rank %d: %s\n", r, errors[static_cast<size_t>(r)].c_str());
      ok = false;
    }
  return ok;
}

/// One AllReduce of `count` int32 on every communicator of `comms` (of one group: members[i] is comms[i]'s old
/// rank); checks every element.
bool allReduceChecked(std::vector<std::unique_ptr<collie::Communicator>>& comms, const std::vector<int>& old,
                      size_t count) {
  const int n = static_cast<int>(comms.size());
  int64_t oldSum = 0;
  for (int r : old) oldSum += r;
  return onEveryRank(n, [&](int r) {
    std::vector<int32_t> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = old[static_cast<size_t>(r)] + static_cast<int32_t>(i);
    comms[static_cast<size_t>(r)]->allReduce(buf.data(), buf.data(), count, collie::DataType::Int32,
                                             collie::ReduceOp::Sum);
    for (size_t i = 0; i < count; ++i)
      if (buf[i] != static_cast<int32_t>(oldSum + static_cast<int64_t>(n) * static_cast<int64_t>(i)))
        throw std::runtime_error("wrong AllReduce result at element " + std::to_string(i));
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {8, 64};
  size_t count = 1024;
  int repeat = 3;
  bool share = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      sizes = parseList(argv[++i]);
    } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      count = static_cast<size_t>(atol(argv[++i]));
    } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::max(1, atoi(argv[++i]));
    } else if (strcmp(argv[i], "--share") == 0) {
      share = true;
    } else {
      fprintf(stderr, "usage: %s [--ranks 8,64] [--count 1024] [--repeat 3] [--share]\n", argv[0]);
      return 2;
    }
  }
  printEnvironment();
  printf("; split by parity%s; AllReduce of %zu int32; median of %d\n",
         share ? " sharing the parent's connections" : "", count, repeat);
  printf("%6s %10s %16s %16s %14s %13s %13s\n", "ranks", "split_ms", "child_fds/rank", "child_fds/r_AR",
         "left_fds/rank", "first_AR_ms", "second_AR_ms");
  int failures = 0;
  for (int n : sizes) {
    collie::Options options;
    options.timeout = std::chrono::seconds(300);
    options.name = "split_scale";
    std::vector<std::unique_ptr<collie::Communicator>> parents;
    try {
      parents = collie::Communicator::createAll(n, options);
    } catch (const std::exception& e) {
      printf("%6d  init failed: %s\n", n, e.what());
      ++failures;
      continue;
    }
    std::vector<int> all(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
    bool ok = allReduceChecked(parents, all, count);
    collie::Options childOptions;
    childOptions.shareConnections = share;
    std::vector<double> ms, firstMs, secondMs;  // split; the children's first and second AllReduce (both colors)
    double fdsSplit = 0, fdsAr = 0, fdsLeft = 0;
    for (int it = 0; it < repeat && ok; ++it) {
      const int fds0 = openDescriptors();
      std::vector<std::unique_ptr<collie::Communicator>> children(static_cast<size_t>(n));
      const auto t0 = std::chrono::steady_clock::now();
      ok = onEveryRank(n, [&](int r) {
        children[static_cast<size_t>(r)] = parents[static_cast<size_t>(r)]->split(r % 2, n - r, childOptions);
      });
      ms.push_back(seconds(std::chrono::steady_clock::now() - t0) * 1e3);
      fdsSplit = static_cast<double>(openDescriptors() - fds0) / n;
      // The children's first AllReduce connects their peers; the second runs on those connections: the
      // difference is what making a child's connections costs (what sharing the parent's would save).
      for (int pass = 0; pass < 2 && ok; ++pass) {
        const auto a0 = std::chrono::steady_clock::now();
        for (int color = 0; color < 2 && ok; ++color) {
          std::vector<std::unique_ptr<collie::Communicator>> group;
          std::vector<int> old;
          for (int r = n - 1; r >= 0; --r)
            if (r % 2 == color) {
              group.push_back(std::move(children[static_cast<size_t>(r)]));
              old.push_back(r);
            }
          ok = allReduceChecked(group, old, count);
          for (size_t i = 0; i < group.size(); ++i) children[static_cast<size_t>(old[i])] = std::move(group[i]);
        }
        (pass == 0 ? firstMs : secondMs).push_back(seconds(std::chrono::steady_clock::now() - a0) * 1e3);
      }
      fdsAr = static_cast<double>(openDescriptors() - fds0) / n;
      children.clear();
      fdsLeft = static_cast<double>(openDescriptors() - fds0) / n;
    }
    auto median = [](std::vector<double>& v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    if (!ok) {
      printf("%6d  FAILED\n", n);
      ++failures;
    } else {
      printf("%6d %10.2f %16.1f %16.1f %14.1f %13.2f %13.2f\n", n, median(ms), fdsSplit, fdsAr, fdsLeft,
             median(firstMs), median(secondMs));
    }
    fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
