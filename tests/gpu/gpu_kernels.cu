// Kernels of the GPU tests.
#include "gpu/gpu_test_util.hpp"

namespace collie::test::gpu {
namespace {

// One block: thread 0 waits on the GPU's nanosecond timer, then the block copies.
__global__ void delayedCopy(char* dst, const char* src, size_t bytes, long long spinNs) {
  if (threadIdx.x == 0 && spinNs > 0) {
    unsigned long long start = 0, now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
      __nanosleep(1000);
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < static_cast<unsigned long long>(spinNs));
  }
  __syncthreads();
  for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void launchDelayedCopy(void* dst, const void* src, size_t bytes, long long spinNs, cudaStream_t stream) {
  delayedCopy<<<1, 512, 0, stream>>>(static_cast<char*>(dst), static_cast<const char*>(src), bytes, spinNs);
  check(cudaGetLastError(), "delayedCopy<<<>>>");
}

}  // namespace collie::test::gpu
