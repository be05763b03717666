/*
 * perf_cuda.hpp: the GPU of one rank for the perf tools' -g 1 (device buffers, as nccl-tests runs them).
 *
 * perf_common.cpp drives it; perf_cuda.cpp is the only perf file that calls CUDA (the runtime, linked statically,
 * so the tools start on machines without a driver), and without COLLIE_WITH_CUDA it only says so. No CUDA header
 * here: streams are collieStream_t (a cudaStream_t).
 */
#ifndef COLLIE_PERF_PERF_CUDA_HPP_
#define COLLIE_PERF_PERF_CUDA_HPP_

#include <collie/collie.h>

#include <cstddef>
#include <memory>
#include <string>

namespace collie_perf {

/** One rank's device, buffers, stream and timing events. Methods throw std::runtime_error naming the CUDA error. */
class Device {
 public:
  virtual ~Device() = default;
  /** The CUDA device ordinal. */
  virtual int ordinal() const = 0;
  /** For the "# Using devices" lines: "[0x1b] NVIDIA H100 80GB HBM3" (PCI bus id and name). */
  virtual std::string description() const = 0;
  /** The non-blocking stream that every collective and copy of this rank runs on. */
  virtual collieStream_t stream() const = 0;
  /** The device send and receive buffers, and page-locked host buffers of the same size (zeroed). */
  virtual char* send() const = 0;
  virtual char* recv() const = 0;
  virtual char* hostSend() const = 0;
  virtual char* hostRecv() const = 0;
  /** Enqueues a copy of bytes on the stream, in either direction (cudaMemcpyDefault). */
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  /** Waits until everything enqueued on the stream has run (cudaStreamSynchronize). */
  virtual void Synchronize() = 0;
  /** Record the start and stop events on the stream (cudaEventRecord). */
  virtual void RecordStart() = 0;
  virtual void RecordStop() = 0;
  /** Seconds from the start event to the stop event (cudaEventElapsedTime), once the stream was synchronized. */
  virtual double ElapsedSeconds() = 0;
};

/**
 * Opens GPU localRank % cudaGetDeviceCount() (several ranks may share one), creates the stream and events and
 * allocates two device and two pinned host buffers of `bytes` each. Null on failure, with the reason in *why
 * (no device: cudaGetDeviceCount's error; "built without CUDA" in builds without COLLIE_WITH_CUDA).
 */
std::unique_ptr<Device> OpenDevice(int localRank, size_t bytes, std::string* why);

}  // namespace collie_perf

#endif  // COLLIE_PERF_PERF_CUDA_HPP_
