// Helpers of the GPU tests (tests/gpu/): whether a GPU can be used, device memory, CUDA error checks, and the
// kernels of the stream-ordering tests (gpu_kernels.cu).
//
// Whether a GPU is there is asked in a forked child, so that the test process itself does not initialise CUDA:
// a process forked after that (the ProcessLauncher's ranks) could not use CUDA.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace collie::test::gpu {

/// Empty when this machine has a usable CUDA device; else why not, e.g. "no CUDA device: cudaGetDeviceCount
/// returned cudaErrorNoDevice (no CUDA-capable device is detected)".
const std::string& skipReason();
/// The number of CUDA devices (0 when skipReason() is not empty).
int deviceCount();

/// Throws std::runtime_error naming the call and the CUDA error.
void check(cudaError_t e, const char* what);

/// Device memory (cudaMalloc / cudaFree).
class DeviceMem {
 public:
  explicit DeviceMem(size_t bytes);
  ~DeviceMem();
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  char* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  char* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Page-locked host memory (cudaMallocHost / cudaFreeHost). Tests copy through it rather than through pageable
/// memory: a copy from or to pageable memory can block its thread inside the driver while the stream waits for
/// another rank of the process, and that rank's next CUDA call can then wait for the driver (a deadlock).
class PinnedMem {
 public:
  explicit PinnedMem(size_t bytes);
  ~PinnedMem();
  PinnedMem(const PinnedMem&) = delete;
  PinnedMem& operator=(const PinnedMem&) = delete;
  uint8_t* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// A non-blocking stream (cudaStreamCreateWithFlags / cudaStreamDestroy).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// Enqueues a kernel that spins for about `spinNs` nanoseconds of GPU time, then copies `bytes` from src to dst.
void launchDelayedCopy(void* dst, const void* src, size_t bytes, long long spinNs, cudaStream_t stream);

}  // namespace collie::test::gpu

/// Skips the test, with the reason, when no CUDA device can be used.
#define COLLIE_SKIP_WITHOUT_GPU()                                                                      \
  do {                                                                                                 \
    if (!::collie::test::gpu::skipReason().empty()) GTEST_SKIP() << ::collie::test::gpu::skipReason(); \
  } while (0)

/// Fails the current test (fatally, from a void function) when a CUDA call fails.
#define CUDA_ASSERT(expr)                                                                                   \
  do {                                                                                                      \
    cudaError_t collieCudaErr_ = (expr);                                                                    \
    ASSERT_EQ(collieCudaErr_, cudaSuccess)                                                                  \
        << #expr << ": " << cudaGetErrorName(collieCudaErr_) << ": " << cudaGetErrorString(collieCudaErr_); \
  } while (0)
