// bench_reduce: throughput of the host reduction kernel base::reduce() beside memcpy, in the same run.
//
// reduce/<dtype>/<op>/<size>: dst[i] = a[i] op b[i] over three separate buffers of <size> bytes each; the bytes/s
// counter counts 3 * size per call (two buffers read, one written).
// memcpy/<size>: memcpy between two buffers of <size> bytes; counted as 2 * size per call (one read, one written),
// so both report memory traffic and the ratio says how close reduce() comes to a copy.
//
// The reduce rows run the kernels base::kernelIsa() picks for this CPU (their name is each row's label);
// --kernel=portable (or x86-64-v3) picks others, to compare them.
//
//   bench_reduce [--kernel=portable] [--benchmark_filter=float16] [--benchmark_repetitions=3] ...
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/datatypes.hpp"

namespace {

using collie::DataType;
using collie::ReduceOp;
namespace base = collie::base;

constexpr size_t kSizes[] = {size_t{1} << 20, size_t{16} << 20};
constexpr DataType kTypes[] = {DataType::Float32, DataType::Float16, DataType::Bfloat16, DataType::Float64,
                               DataType::Int32};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max};

std::string sizeName(size_t bytes) { return std::to_string(bytes >> 20) + "MiB"; }

// A buffer of `bytes` bytes, page-aligned, filled with small finite values of `type` (no NaN, Inf or denormals,
// which would measure something other than the common case).
struct Buffer {
  explicit Buffer(size_t bytes) : data(static_cast<unsigned char*>(std::aligned_alloc(4096, bytes))), size(bytes) {
    if (data == nullptr) std::abort();
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void fill(DataType type, unsigned seed) {
    size_t count = size / base::dataTypeSize(type);
    for (size_t i = 0; i < count; ++i) {
      float v = static_cast<float>((i * 2654435761u + seed) % 1000) / 16.0f - 30.0f;
      switch (type) {
        case DataType::Float32:
          reinterpret_cast<float*>(data)[i] = v;
          break;
        case DataType::Float64:
          reinterpret_cast<double*>(data)[i] = v;
          break;
        case DataType::Float16:
          reinterpret_cast<uint16_t*>(data)[i] = base::floatToHalf(v);
          break;
        case DataType::Bfloat16:
          reinterpret_cast<uint16_t*>(data)[i] = base::floatToBf16(v);
          break;
        case DataType::Int32:
          reinterpret_cast<int32_t*>(data)[i] = static_cast<int32_t>(v * 16.0f);
          break;
        default:
          std::memset(data, static_cast<int>(seed), size);
          return;
      }
    }
  }

  unsigned char* data;
  size_t size;
};

void benchReduce(benchmark::State& state, DataType type, ReduceOp op, size_t bytes) {
  Buffer a(bytes), b(bytes), dst(bytes);
  a.fill(type, 1);
  b.fill(type, 2);
  std::memset(dst.data, 0, bytes);
  const size_t count = bytes / base::dataTypeSize(type);
  for (auto _ : state) {
    base::reduce(dst.data, a.data, b.data, count, type, op);
    benchmark::DoNotOptimize(dst.data);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(3 * bytes));
  state.SetLabel(base::kernelIsaName(base::kernelIsa()));
}

void benchMemcpy(benchmark::State& state, size_t bytes) {
  Buffer src(bytes), dst(bytes);
  std::memset(src.data, 1, bytes);
  std::memset(dst.data, 0, bytes);
  for (auto _ : state) {
    std::memcpy(dst.data, src.data, bytes);
    benchmark::DoNotOptimize(dst.data);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * bytes));
}

// Takes --kernel=NAME out of argv (Google Benchmark rejects flags it does not know) and applies it.
bool applyKernelFlag(int* argc, char** argv) {
  const std::string prefix = "--kernel=";
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind(prefix, 0) != 0) {
      argv[out++] = argv[i];
      continue;
    }
    std::string name = arg.substr(prefix.size());
    bool found = false;
    for (base::KernelIsa isa : {base::KernelIsa::Portable, base::KernelIsa::X86V3}) {
      if (name != base::kernelIsaName(isa)) continue;
      found = true;
      if (!base::setKernelIsa(isa)) {
        std::fprintf(stderr, "bench_reduce: this build or CPU cannot run the %s kernels\n", name.c_str());
        return false;
      }
    }
    if (!found) {
      std::fprintf(stderr, "bench_reduce: unknown kernel '%s' (portable, x86-64-v3)\n", name.c_str());
      return false;
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!applyKernelFlag(&argc, argv)) return 2;
  for (size_t bytes : kSizes) {
    benchmark::RegisterBenchmark(("memcpy/" + sizeName(bytes)).c_str(), benchMemcpy, bytes);
    for (DataType type : kTypes) {
      for (ReduceOp op : kOps) {
        std::string name =
            std::string("reduce/") + base::dataTypeName(type) + "/" + base::reduceOpName(op) + "/" + sizeName(bytes);
        benchmark::RegisterBenchmark(name.c_str(), benchReduce, type, op, bytes);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
