// bench_schedule: how long building one rank's schedule takes, per collective, algorithm and nranks.
//
// build/<collective>/<algorithm>/<nranks>: algorithms::build() for rank nranks/2 (a middle rank: in the trees and
// in the folded halving-doubling it has as many steps as any) of a 64 MiB float32 call. The communicator caches
// schedules per (algorithm, collective, rank, count, root), so this cost is paid on the first call of a size only;
// the "steps" counter says how long the plan is, "ns/step" what each step costs to make.
//
// Also lookup/<nranks>: the cost of finding a cached schedule again, i.e. what every later call of the same size
// pays (the same hash map the communicator keeps).
//
//   bench_schedule [--benchmark_filter=allreduce/tree] [--benchmark_min_time=0.05] ...
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "algorithms/algorithms.hpp"
#include "algorithms/schedule.hpp"

namespace {

namespace algos = collie::algorithms;
using algos::Algorithm;
using algos::Collective;

constexpr size_t kBytes = size_t{64} << 20;
constexpr size_t kElem = sizeof(float);
constexpr int kRankCounts[] = {2, 8, 64, 512, 4096};
constexpr Collective kCollectives[] = {Collective::AllReduce, Collective::Broadcast,     Collective::Reduce,
                                       Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll};

algos::ScheduleKey keyFor(Collective coll, int nranks) {
  algos::ScheduleKey key;
  key.coll = coll;
  key.nranks = nranks;
  key.rank = nranks / 2;
  key.root = 0;
  // Counts as in the C API: per-rank blocks for AllGather / ReduceScatter / AllToAll, the whole buffer otherwise.
  const bool perRank =
      coll == Collective::AllGather || coll == Collective::ReduceScatter || coll == Collective::AllToAll;
  key.count = perRank ? kBytes / kElem / static_cast<size_t>(nranks) : kBytes / kElem;
  return key;
}

void buildOne(benchmark::State& state, Algorithm algo, Collective coll, int nranks) {
  const algos::ScheduleKey key = keyFor(coll, nranks);
  size_t steps = 0;
  for (auto _ : state) {
    algos::Schedule s = algos::build(algo, key);
    steps = s.steps.size();
    benchmark::DoNotOptimize(s.steps.data());
  }
  state.counters["steps"] = static_cast<double>(steps);
  state.counters["ns/step"] = benchmark::Counter(static_cast<double>(steps) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void lookup(benchmark::State& state, int nranks) {
  std::unordered_map<algos::ScheduleId, algos::Schedule, algos::ScheduleIdHash> cache;  // as core::Planner keeps it
  const algos::ScheduleId id{Algorithm::Ring, keyFor(Collective::AllReduce, nranks)};
  cache.emplace(id, algos::build(id.first, id.second));
  for (auto _ : state) benchmark::DoNotOptimize(cache.find(id));
}

void registerAll() {
  for (Collective coll : kCollectives)
    for (Algorithm algo : algos::kAllAlgorithms) {
      if (!algos::supports(algo, coll)) continue;
      for (int n : kRankCounts) {
        // AllToAll plans one step per peer and are built for every call size anyway; 4096 x 4096 is pointless.
        if (coll == Collective::AllToAll && n > 512) continue;
        const std::string name = std::string("build/") + algos::collectiveName(coll) + "/" +
                                 algos::algorithmName(algo) + "/" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), buildOne, algo, coll, n);
      }
    }
  for (int n : kRankCounts) benchmark::RegisterBenchmark(("lookup/" + std::to_string(n)).c_str(), lookup, n);
}

}  // namespace

int main(int argc, char** argv) {
  registerAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
