// init_scale: what a communicator's init costs as the rank count grows, with every rank a thread of this process
// (Communicator::createAll): wall time of init, file descriptors and resident memory per rank after init and
// after one AllReduce (verified element by element), and the time of that first AllReduce (which, with
// connections made on first use, includes connecting). The transport is whatever the environment selects (e.g.
// COLLIE_SHM_DISABLE=1 for tcp). It uses only the public API that collie had before connections on first use, so
// the same file builds against an older collie for a before/after table (perf/RESULTS.md). Connections on first
// use are not the default (README, COLLIE_CONNECT): run it with COLLIE_CONNECT=lazy for the scalable figures.
//
//   COLLIE_CONNECT=lazy init_scale --ranks 8,32,128,512 [--count 1024]
// prints one line per rank count: ranks, init s, fds/rank after init, fds/rank after the AllReduce, RSS MiB/rank,
// first AllReduce ms, second AllReduce ms (nothing left to connect), then a Send/Recv shift by N/2 (far peers in
// init's tree) the first time and again, or the error that stopped it. COLLIE_PEER_CARDS=directory: cards learned
// on first connection (the far shift's first run pays the lookups).
#include <unistd.h>

#include <chrono>
#include <collie/collie.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "scale_common.hpp"

namespace {

using collie_perf::openDescriptors;
using collie_perf::parseList;
using collie_perf::printEnvironment;
using collie_perf::residentMiB;
using collie_perf::seconds;

// One AllReduce of `count` int32 on every rank (a thread each); returns false and prints when a result is wrong.
bool allReduceChecked(std::vector<std::unique_ptr<collie::Communicator>>& comms, size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::thread> threads;
  std::vector<int> bad(comms.size(), 0);
  std::vector<std::string> errors(comms.size());
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int32_t> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = r + static_cast<int32_t>(i);
      try {
        comms[static_cast<size_t>(r)]->allReduce(buf.data(), buf.data(), count, collie::DataType::Int32,
                                                 collie::ReduceOp::Sum);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        bad[static_cast<size_t>(r)] = 1;
        return;
      }
      const int64_t ranksSum = static_cast<int64_t>(n) * (n - 1) / 2;
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != static_cast<int32_t>(ranksSum + static_cast<int64_t>(n) * static_cast<int64_t>(i))) {
          bad[static_cast<size_t>(r)] = 1;
          break;
        }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (bad[static_cast<size_t>(r)]) {
      fprintf(stderr, "rank %d: wrong AllReduce result %s\n", r, errors[static_cast<size_t>(r)].c_str());
      return false;
    }
  return true;
}

// Every rank sends `count` int32 to rank r + n/2 and receives from r - n/2 (a peer far away in init's tree, whose
// contact card a rank holds only under COLLIE_PEER_CARDS=all until it first connects); false when a value is wrong.
bool farShiftChecked(std::vector<std::unique_ptr<collie::Communicator>>& comms, size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::thread> threads;
  std::vector<int> bad(comms.size(), 0);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const int to = (r + n / 2) % n, from = (r - n / 2 + n) % n;
      std::vector<int32_t> out(count, r), in(count, -1);
      collie::Communicator& c = *comms[static_cast<size_t>(r)];
      try {
        collie::groupStart();
        c.send(out.data(), count, collie::DataType::Int32, to);
        c.recv(in.data(), count, collie::DataType::Int32, from);
        collie::groupEnd();
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: far shift failed: %s\n", r, e.what());
        bad[static_cast<size_t>(r)] = 1;
        return;
      }
      for (size_t i = 0; i < count; ++i) bad[static_cast<size_t>(r)] |= in[i] != from;
    });
  }
  for (auto& t : threads) t.join();
  for (int b : bad)
    if (b) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {8, 32, 128, 512};
  size_t count = 1024;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      sizes = parseList(argv[++i]);
    } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      count = static_cast<size_t>(atol(argv[++i]));
    } else {
      fprintf(stderr, "usage: %s [--ranks 8,32,128,512] [--count 1024]\n", argv[0]);
      return 2;
    }
  }
  printEnvironment();
  printf("; AllReduce of %zu int32\n", count);
  printf("%6s %9s %12s %14s %12s %14s %14s %13s %13s\n", "ranks", "init_s", "fds/rank", "fds/rank_AR", "RSS_MiB/rank",
         "first_AR_ms", "second_AR_ms", "far_first_ms", "far_again_ms");
  int failures = 0;
  for (int n : sizes) {
    const int fds0 = openDescriptors();
    const double rss0 = residentMiB();
    collie::Options options;
    options.timeout = std::chrono::seconds(300);
    options.name = "init_scale";
    std::vector<std::unique_ptr<collie::Communicator>> comms;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      comms = collie::Communicator::createAll(n, options);
    } catch (const std::exception& e) {
      printf("%6d  init failed after %.2f s: %s\n", n, seconds(std::chrono::steady_clock::now() - t0), e.what());
      fflush(stdout);
      ++failures;
      continue;
    }
    const double initS = seconds(std::chrono::steady_clock::now() - t0);
    const double fdsInit = static_cast<double>(openDescriptors() - fds0) / n;
    const auto t1 = std::chrono::steady_clock::now();
    bool ok = allReduceChecked(comms, count);
    const double arMs = seconds(std::chrono::steady_clock::now() - t1) * 1e3;
    const auto t2 = std::chrono::steady_clock::now();
    ok = allReduceChecked(comms, count) && ok;  // connected already: what the first one paid to connect shows
    const double ar2Ms = seconds(std::chrono::steady_clock::now() - t2) * 1e3;
    const double fdsAr = static_cast<double>(openDescriptors() - fds0) / n;
    const double rss = (residentMiB() - rss0) / n;
    const auto t3 = std::chrono::steady_clock::now();
    ok = farShiftChecked(comms, count) && ok;  // connects (and under a directory first learns) a far peer
    const double farMs = seconds(std::chrono::steady_clock::now() - t3) * 1e3;
    const auto t4 = std::chrono::steady_clock::now();
    ok = farShiftChecked(comms, count) && ok;
    const double far2Ms = seconds(std::chrono::steady_clock::now() - t4) * 1e3;
    printf("%6d %9.3f %12.1f %14.1f %12.2f %14.1f %14.1f %13.1f %13.1f%s\n", n, initS, fdsInit, fdsAr, rss, arMs, ar2Ms,
           farMs, far2Ms, ok ? "" : "  WRONG RESULT");
    fflush(stdout);
    failures += ok ? 0 : 1;
    comms.clear();
  }
  return failures == 0 ? 0 : 1;
}
