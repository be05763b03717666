// bench_flight_recorder: what the flight recorder adds to every call, measured alone: begin() + finish(true) on a
// 256-entry ring (the default), as the planner and the communicator call them per collective, against an empty loop
// body. The 8-byte AllReduce it rides on takes ~400 ns on shm (perf/RESULTS.md). The recorder's hooks also keep the
// call statistics (call_stats.hpp), so BM_RecordOneCall includes them; under COLLIE_STATS=1 (or COLLIE_TRACE) the
// calls are timed (two clock reads). BM_TraceOneCall, run with COLLIE_TRACE=PREFIX, adds the timeline of a 2-rank
// 8-byte AllReduce: the call and its two waits (send to and receive from the peer), written out every 4096 events.
#include <benchmark/benchmark.h>

#include "core/call_trace.hpp"
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

void BM_TraceOneCall(benchmark::State& state) {
  FlightRecorder rec(0, 2, "bench", 256);
  auto trace = collie::core::CallTrace::open(0, 2, "bench", rec.clock(), {"shm"});
  if (!trace) {
    state.SkipWithError("set COLLIE_TRACE=PREFIX to measure the trace");
    return;
  }
  rec.setTrace(trace.get());
  OpDesc op = collie::core::makeOp(collie::algorithms::Collective::AllReduce, nullptr, nullptr, 2,
                                   collie::DataType::Float32, collie::ReduceOp::Sum, 0);
  for (auto _ : state) {
    rec.begin(op, collie::algorithms::Algorithm::Direct, 1u, 8);
    const uint64_t t = collie::core::TickClock::ticks();
    trace->stepWait(0, 0, 1, false, 8, t, collie::core::TickClock::ticks());
    trace->stepWait(0, 1, 1, true, 8, t, collie::core::TickClock::ticks());
    rec.finish(true);
    benchmark::ClobberMemory();
  }
  rec.setTrace(nullptr);
}
BENCHMARK(BM_TraceOneCall);

void BM_EmptyCall(benchmark::State& state) {
  for (auto _ : state) benchmark::ClobberMemory();
}
BENCHMARK(BM_EmptyCall);

}  // namespace

BENCHMARK_MAIN();
