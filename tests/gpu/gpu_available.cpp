// CTest's gpu.available (label gpu): the one place a plain `ctest` run says why the GPU tests are skipped. Without
// a usable CUDA device it prints the reason ("no CUDA device: cudaGetDeviceCount returned ...") and exits with
// kSkip, which CTest reports as Skipped (SKIP_RETURN_CODE), never as passed or failed; with one it names the
// devices and passes. The probe is the GPU tests' own (gpu::skipReason()), so it says exactly why they skip.
#include <cstdio>

#include "gpu/gpu_test_util.hpp"

namespace {
constexpr int kSkip = 77;
}  // namespace

int main() {
  const std::string& reason = collie::test::gpu::skipReason();
  if (!reason.empty()) {
    printf("%s: the GPU tests are skipped\n", reason.c_str());
    return kSkip;
  }
  printf("%d CUDA device(s): the GPU tests run\n", collie::test::gpu::deviceCount());
  return 0;
}
