/*
 * perf_cuda.cpp: the device of -g 1 (see perf_cuda.hpp). Compiled against the CUDA runtime when the build has
 * COLLIE_WITH_CUDA (COLLIE_PERF_WITH_CUDA is then defined), else OpenDevice only reports that.
 */
#include "perf_cuda.hpp"

#ifdef COLLIE_PERF_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstdio>
#include <stdexcept>

namespace collie_perf {
namespace {

std::string CudaError(const char* call, cudaError_t e) {
  return std::string(call) + " returned " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

void Check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(CudaError(call, e));
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}

  // Frees whatever Open got, even after a failure half-way. Called once the stream and the communicator are done.
  ~CudaDevice() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (send_) cudaFree(send_);
    if (recv_) cudaFree(recv_);
    if (hostSend_) cudaFreeHost(hostSend_);
    if (hostRecv_) cudaFreeHost(hostRecv_);
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  void Open(size_t bytes) {
    Check(cudaSetDevice(ordinal_), "cudaSetDevice");
    cudaDeviceProp prop{};
    Check(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties");
    char what[320];
    std::snprintf(what, sizeof what, "[0x%02x] %s", prop.pciBusID, prop.name);
    description_ = what;
    Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    Check(cudaEventCreate(&start_), "cudaEventCreate");
    Check(cudaEventCreate(&stop_), "cudaEventCreate");
    void* p = nullptr;
    Check(cudaMalloc(&p, bytes), "cudaMalloc");
    send_ = static_cast<char*>(p);
    Check(cudaMalloc(&p, bytes), "cudaMalloc");
    recv_ = static_cast<char*>(p);
    // Page-locked: copies from and to it are true async copies, which never block this thread in the driver.
    Check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    hostSend_ = static_cast<char*>(p);
    Check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    hostRecv_ = static_cast<char*>(p);
    Check(cudaMemset(send_, 0, bytes), "cudaMemset");  // every page touched before timing
    Check(cudaMemset(recv_, 0, bytes), "cudaMemset");
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  int ordinal() const override { return ordinal_; }
  std::string description() const override { return description_; }
  collieStream_t stream() const override { return stream_; }
  char* send() const override { return send_; }
  char* recv() const override { return recv_; }
  char* hostSend() const override { return hostSend_; }
  char* hostRecv() const override { return hostRecv_; }

  void Copy(void* dst, const void* src, size_t bytes) override {
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
  }
  void Synchronize() override { Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void RecordStart() override { Check(cudaEventRecord(start_, stream_), "cudaEventRecord"); }
  void RecordStop() override { Check(cudaEventRecord(stop_, stream_), "cudaEventRecord"); }
  double ElapsedSeconds() override {
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms / 1e3;
  }

 private:
  int ordinal_;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  char* send_ = nullptr;
  char* recv_ = nullptr;
  char* hostSend_ = nullptr;
  char* hostRecv_ = nullptr;
};

}  // namespace

std::unique_ptr<Device> OpenDevice(int localRank, size_t bytes, std::string* why) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    *why = "-g 1: no CUDA device can be used: " + CudaError("cudaGetDeviceCount", e);
    return nullptr;
  }
  if (count <= 0) {
    *why = "-g 1: no CUDA device can be used: cudaGetDeviceCount returned 0 devices";
    return nullptr;
  }
  const int ordinal = (localRank < 0 ? 0 : localRank) % count;
  auto dev = std::make_unique<CudaDevice>(ordinal);
  try {
    dev->Open(bytes);
  } catch (const std::exception& e) {
    *why = "-g 1: GPU " + std::to_string(ordinal) + " (local rank " + std::to_string(localRank) + " of " +
           std::to_string(count) + " devices), 2 x " + std::to_string(bytes) + " bytes: " + e.what();
    return nullptr;
  }
  return dev;
}

}  // namespace collie_perf

#else  // !COLLIE_PERF_WITH_CUDA

namespace collie_perf {

std::unique_ptr<Device> OpenDevice(int localRank, size_t bytes, std::string* why) {
  (void)localRank;
  (void)bytes;
  *why =
      "-g 1: device buffers need CUDA, but the perf tools were built without CUDA (configure with "
      "-DCOLLIE_WITH_CUDA=ON on a machine with the CUDA toolkit); -g 0 runs on host buffers";
  return nullptr;
}

}  // namespace collie_perf

#endif  // COLLIE_PERF_WITH_CUDA
