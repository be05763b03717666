// bench_cuda_reduce: Google Benchmark of the device reduction kernels (src/cuda/reduce_kernels.cu) per type and op,
// beside cudaMemcpy device-to-device in the same run.
//
//   bench_cuda_reduce [--bytes=N,...] [Google Benchmark flags]
//
// Each reduction reads two inputs and writes one output (the fused form writes a second one); GB/s counts every
// byte read and written, and so does the memcpy line (one read, one write), so the two are comparable: a
// kernel at memory speed shows vs_memcpy near 1. Times come from CUDA events around 20 launches (manual time).
// Without a usable GPU it says so and exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cuda/reduce_kernels.hpp"

namespace {

constexpr int kLaunchesPerIteration = 20;

const char* const kTypeNames[] = {"int8",   "uint8", "int32", "uint32", "int64",
                                  "uint64", "half",  "float", "double", "bfloat16"};
const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg"};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_cuda_reduce: %s: %s: %s\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return false;
}

// Three device buffers of the largest size, shared by every benchmark.
struct Buffers {
  void* a = nullptr;
  void* b = nullptr;
  void* dst = nullptr;
  void* dst2 = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};
Buffers g;
std::map<size_t, double> gMemcpyGBs;  // by buffer size, measured first

// Times `launches` calls of f on the stream with events; returns seconds per call.
template <typename F>
double timeLaunches(F&& f, benchmark::State* state) {
  cudaEventRecord(g.start, g.stream);
  for (int i = 0; i < kLaunchesPerIteration; ++i) {
    cudaError_t e = f();
    if (e != cudaSuccess) {
      if (state) state->SkipWithError(cudaGetErrorString(e));
      return 0;
    }
  }
  cudaEventRecord(g.stop, g.stream);
  cudaEventSynchronize(g.stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, g.start, g.stop);
  return ms / 1e3 / kLaunchesPerIteration;
}

void report(benchmark::State& state, double bytesPerCall, size_t size) {
  state.counters["GB/s"] = benchmark::Counter(bytesPerCall / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  auto it = gMemcpyGBs.find(size);
  if (it != gMemcpyGBs.end() && it->second > 0) {
    // GB/s of this benchmark over memcpy's, from the mean time of all iterations.
    state.counters["vs_memcpy"] =
        benchmark::Counter(bytesPerCall / 1e9 / it->second, benchmark::Counter::kIsIterationInvariantRate);
  }
}

void benchMemcpy(benchmark::State& state, size_t bytes) {
  for (auto _ : state) {
    state.SetIterationTime(
        timeLaunches([&] { return cudaMemcpyAsync(g.dst, g.a, bytes, cudaMemcpyDeviceToDevice, g.stream); }, &state));
  }
  report(state, 2.0 * static_cast<double>(bytes), 0);
}

void benchReduce(benchmark::State& state, size_t bytes, int type, int op, bool fused) {
  const size_t count = bytes / collie::cuda::elementSize(type);
  const int divisor = op == 4 ? 4 : 1;  // Avg: as the last step of a 4-rank average
  for (auto _ : state) {
    state.SetIterationTime(timeLaunches(
        [&] {
          return collie::cuda::launchReduce(g.dst, fused ? g.dst2 : nullptr, g.a, g.b, count, type, op, divisor,
                                            g.stream);
        },
        &state));
  }
  report(state, (fused ? 4.0 : 3.0) * static_cast<double>(count * collie::cuda::elementSize(type)), bytes);
}

std::string human(size_t bytes) {
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {size_t{1} << 20, size_t{64} << 20};
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--bytes=", 8) == 0) {
      sizes.clear();
      for (char* p = argv[i] + 8; *p;) {
        char* end = nullptr;
        unsigned long long v = std::strtoull(p, &end, 10);
        if (end == p) break;
        if (*end == 'K' || *end == 'k') v <<= 10, ++end;
        if (*end == 'M' || *end == 'm') v <<= 20, ++end;
        if (v > 0) sizes.push_back(static_cast<size_t>(v));
        p = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
      }
      continue;
    }
    args.push_back(argv[i]);
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("bench_cuda_reduce: no CUDA device (cudaGetDeviceCount: %s); nothing to measure\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  size_t maxBytes = 0;
  for (size_t s : sizes) maxBytes = s > maxBytes ? s : maxBytes;
  if (!ok(cudaMalloc(&g.a, maxBytes), "cudaMalloc") || !ok(cudaMalloc(&g.b, maxBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&g.dst, maxBytes), "cudaMalloc") || !ok(cudaMalloc(&g.dst2, maxBytes), "cudaMalloc") ||
      !ok(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !ok(cudaEventCreate(&g.start), "cudaEventCreate") || !ok(cudaEventCreate(&g.stop), "cudaEventCreate"))
    return 1;
  // Normal, finite values in every type (0x3c bytes: 1.05 as half, 0.0115 as float).
  if (!ok(cudaMemset(g.a, 0x3c, maxBytes), "cudaMemset") || !ok(cudaMemset(g.b, 0x3c, maxBytes), "cudaMemset"))
    return 1;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device 0: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // memcpy first, also measured once here so that every reduction line can show vs_memcpy.
  for (size_t s : sizes) {
    timeLaunches([&] { return cudaMemcpyAsync(g.dst, g.a, s, cudaMemcpyDeviceToDevice, g.stream); }, nullptr);
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      double t =
          timeLaunches([&] { return cudaMemcpyAsync(g.dst, g.a, s, cudaMemcpyDeviceToDevice, g.stream); }, nullptr);
      if (t > 0 && t < best) best = t;
    }
    gMemcpyGBs[s] = 2.0 * static_cast<double>(s) / best / 1e9;
    benchmark::RegisterBenchmark(("memcpy_d2d/" + human(s)).c_str(), benchMemcpy, s)->UseManualTime();
  }
  for (size_t s : sizes) {
    for (int type = 0; type < 10; ++type) {
      for (int op = 0; op < 5; ++op) {
        std::string name = std::string("reduce/") + kTypeNames[type] + "/" + kOpNames[op] + "/" + human(s);
        benchmark::RegisterBenchmark(name.c_str(), benchReduce, s, type, op, false)->UseManualTime();
      }
    }
    for (int type : {7, 6, 9}) {  // fused reduce-and-copy: float, half, bfloat16 sum
      std::string name = std::string("reduce_copy/") + kTypeNames[type] + "/sum/" + human(s);
      benchmark::RegisterBenchmark(name.c_str(), benchReduce, s, type, 0, true)->UseManualTime();
    }
  }
  int bargc = static_cast<int>(args.size());
  benchmark::Initialize(&bargc, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
