// bench_flight_recorder: what the flight recorder adds to every call, measured alone: begin() + finish(true) on a
// 256-entry ring (the default), as the planner and the communicator call them per collective, against an empty loop
// body. The 8-byte AllReduce it rides on takes ~400 ns on shm (perf/RESULTS.md).
#include <benchmark/benchmark.h>

#include "core/flight_recorder.hpp"

namespace {

using collie::core::FlightRecorder;
using collie::core::OpDesc;

void BM_RecordOneCall(benchmark::State& state) {
  FlightRecorder rec(0, 2, "bench", 256);
  OpDesc op = collie::core::makeOp(collie::algorithms::Collective::AllReduce, nullptr, nullptr, 2,
                                   collie::DataType::Float32, collie::ReduceOp::Sum, 0);
  for (auto _ : state) {
    rec.begin(op, collie::algorithms::Algorithm::Direct, 1u, 8);
    rec.finish(true);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(rec.calls());
}
BENCHMARK(BM_RecordOneCall);

void BM_EmptyCall(benchmark::State& state) {
  for (auto _ : state) benchmark::ClobberMemory();
}
BENCHMARK(BM_EmptyCall);

}  // namespace

BENCHMARK_MAIN();
