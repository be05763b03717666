// Device buffers staged through pinned host memory (see device_stager.hpp).
#include "core/device_stager.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "base/log.hpp"
#include "core/validate.hpp"

namespace collie::core {

using algorithms::Collective;

// ---- Helpers ------------------------------------------------------------------------------------------------

namespace {

constexpr size_t kMinBlock = 64 * 1024;
constexpr size_t kFlagsPerChunk = 1024;

// Makes `device` current on this thread for the scope (CUDA calls that enqueue need the stream's device).
class DeviceGuard {
 public:
  DeviceGuard(const CollieCudaPlugin& p, int device) : p_(p) {
    if (device < 0) return;
    cuda::check(p_.getDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) {
      cuda::check(p_.setDevice(device), "cudaSetDevice");
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_) p_.setDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  const CollieCudaPlugin& p_;
  int prev_ = -1;
  bool changed_ = false;
};

size_t roundBlock(size_t bytes) {
  bytes = std::max(bytes, kMinBlock);
  constexpr size_t kPow2Limit = size_t{256} << 20;
  if (bytes <= kPow2Limit) {
    size_t b = kMinBlock;
    while (b < bytes) b <<= 1;
    return b;
  }
  constexpr size_t kStep = size_t{32} << 20;
  return (bytes + kStep - 1) / kStep * kStep;
}

}  // namespace

// ---- DeviceStager -------------------------------------------------------------------------------------------

DeviceStager::DeviceStager(const CollieCudaPlugin& plugin, int device) : p_(plugin), device_(device) {
  if (device_ < 0) cuda::check(p_.getDevice(&device_), "cudaGetDevice");
  DeviceGuard guard(p_, device_);
  cuda::check(p_.streamCreate(&stream_), "cudaStreamCreateWithFlags (the communicator's copy stream)");
}

DeviceStager::~DeviceStager() {
  // Every call went through the progress thread, which released it; release again in case one did not, since
  // a stream waiting on a flag would never finish.
  for (auto& [op, flag] : inFlight_) release(*op);
  std::optional<DeviceGuard> guard;
  try {
    guard.emplace(p_, device_);
  } catch (const std::exception& e) {
    COLLIE_WARN(base::kLogColl, "communicator destruction: %s", e.what());
  }
  if (stream_) {
    int rc = p_.streamSynchronize(stream_);
    if (rc != 0)
      COLLIE_WARN(base::kLogColl, "cudaStreamSynchronize at communicator destruction: %s", p_.errorString(rc));
    p_.streamDestroy(stream_);
  }
  for (void* ev : allEvents_) p_.eventDestroy(ev);
  for (const auto& b : allBlocks_) p_.hostFree(b.ptr);
  for (void* chunk : flagChunks_) p_.hostFree(chunk);
}

StagedOp::Block DeviceStager::acquireBlock(size_t bytes) {
  auto best = freeBlocks_.end();
  for (auto it = freeBlocks_.begin(); it != freeBlocks_.end(); ++it)
    if (it->bytes >= bytes && (best == freeBlocks_.end() || it->bytes < best->bytes)) best = it;
  if (best != freeBlocks_.end()) {
    StagedOp::Block b = *best;
    freeBlocks_.erase(best);
    return b;
  }
  StagedOp::Block b;
  b.bytes = roundBlock(bytes);
  void* p = nullptr;
  int rc = p_.hostAlloc(&p, b.bytes);
  if (rc != 0) {
    COLLIE_FAIL(ErrorCode::UnhandledCudaError, "cudaHostAlloc of %zu bytes (staging for device buffers) failed: %s",
                b.bytes, p_.errorString(rc));
  }
  b.ptr = static_cast<char*>(p);
  allBlocks_.push_back(b);
  return b;
}

void* DeviceStager::acquireEvent() {
  if (!freeEvents_.empty()) {
    void* ev = freeEvents_.back();
    freeEvents_.pop_back();
    return ev;
  }
  void* ev = nullptr;
  cuda::check(p_.eventCreate(&ev), "cudaEventCreateWithFlags");
  allEvents_.push_back(ev);
  return ev;
}

uint32_t* DeviceStager::acquireFlag(uint32_t* value) {
  if (freeFlags_.empty()) {
    void* chunk = nullptr;
    cuda::check(p_.hostAlloc(&chunk, kFlagsPerChunk * sizeof(uint32_t)), "cudaHostAlloc (flag words)");
    flagChunks_.push_back(chunk);
    auto* words = static_cast<uint32_t*>(chunk);
    for (size_t i = 0; i < kFlagsPerChunk; ++i) {
      __atomic_store_n(&words[i], 0u, __ATOMIC_RELAXED);
      freeFlags_.push_back(Flag{&words[i], 1u});
    }
  }
  Flag f = freeFlags_.back();
  freeFlags_.pop_back();
  *value = f.next;
  return f.word;
}

void DeviceStager::reclaim() {
  while (!inFlight_.empty()) {
    auto& [op, flag] = inFlight_.front();
    if (!op->released.load(std::memory_order_acquire)) break;
    int rc = p_.eventQuery(op->evDone);
    if (rc == cuda::kNotReady) break;
    if (rc != 0) {
      // A failed stream: keep the resources out of use (they are freed with the communicator).
      COLLIE_WARN(base::kLogColl, "device staging: a call's copy-back failed: %s", p_.errorString(rc));
    } else {
      for (const auto& b : op->blocks)
        if (b.ptr) freeBlocks_.push_back(b);
      freeEvents_.push_back(op->evInput);
      freeEvents_.push_back(op->evStaged);
      freeEvents_.push_back(op->evDone);
      freeFlags_.push_back(Flag{flag.word, flag.next + 1});
    }
    inFlight_.pop_front();
  }
}

std::shared_ptr<StagedOp> DeviceStager::stage(OpDesc& op, int rank, int nranks, void* userStream, bool streamOrdered) {
  std::shared_ptr<StagedOp> staged = stageInput(op, rank, nranks, userStream, streamOrdered);
  stageOutput(*staged);
  joinCaller(*staged);
  return staged;
}

std::shared_ptr<StagedOp> DeviceStager::stageInput(OpDesc& op, int rank, int nranks, void* userStream,
                                                   bool streamOrdered) {
  reclaim();
  const BufferExtent e = bufferExtent(op, rank, nranks);  // as validateOp checked it
  auto staged = std::make_shared<StagedOp>();
  const char* devSend = static_cast<const char*>(op.send);
  char* devRecv = static_cast<char*>(op.recv);
  char* pinSend = nullptr;
  char* pinRecv = nullptr;
  const bool both = e.send && e.recv;
  const bool overlap = both && devSend < devRecv + e.recvBytes && devRecv < devSend + e.sendBytes;
  if (overlap) {  // an in-place form: one block for the union, so the pinned buffers overlap alike
    const char* lo = std::min<const char*>(devSend, devRecv);
    const char* hi = std::max<const char*>(devSend + e.sendBytes, devRecv + e.recvBytes);
    staged->blocks[0] = acquireBlock(static_cast<size_t>(hi - lo));
    pinSend = staged->blocks[0].ptr + (devSend - lo);
    pinRecv = staged->blocks[0].ptr + (devRecv - lo);
  } else {
    if (e.send) pinSend = (staged->blocks[0] = acquireBlock(e.sendBytes)).ptr;
    if (e.recv) pinRecv = (staged->blocks[1] = acquireBlock(e.recvBytes)).ptr;
  }
  staged->evInput = acquireEvent();
  staged->evStaged = acquireEvent();
  staged->evDone = acquireEvent();
  Flag flag{};
  flag.word = acquireFlag(&flag.next);
  staged->flag = flag.word;
  staged->flagValue = flag.next;
  staged->waitCopyBack = !streamOrdered;
  staged->userStream = streamOrdered ? userStream : nullptr;
  staged->devRecv = e.recv ? devRecv : nullptr;
  staged->pinRecv = pinRecv;
  staged->recvBytes = e.recv ? e.recvBytes : 0;
  // From here on the call is in flight: its resources come back through reclaim() (or never, if CUDA failed).
  inFlight_.emplace_back(staged, flag);

  try {
    DeviceGuard guard(p_, device_);
    cuda::check(p_.eventRecord(staged->evInput, userStream), "cudaEventRecord on the caller's stream");
    cuda::check(p_.streamWaitEvent(stream_, staged->evInput), "cudaStreamWaitEvent");
    if (e.send) cuda::check(p_.memcpyAsync(pinSend, devSend, e.sendBytes, stream_), "cudaMemcpyAsync (input)");
    cuda::check(p_.eventRecord(staged->evStaged, stream_), "cudaEventRecord");
  } catch (...) {
    // No wait on the flag is enqueued: nothing to release. The resources stay out of use (the stream may still
    // touch them) and are freed with the communicator.
    inFlight_.pop_back();
    throw;
  }

  // The host collective runs on the pinned copies. A buffer this rank does not use is left null, unless it is
  // the other one (an in-place call), which keeps its pinned twin.
  op.send = e.send ? pinSend : (devSend == devRecv ? pinRecv : nullptr);
  op.recv = e.recv ? pinRecv : (devRecv == devSend ? pinSend : nullptr);
  return staged;
}

void DeviceStager::stageOutput(StagedOp& staged) {
  try {
    DeviceGuard guard(p_, device_);
    cuda::check(p_.streamWaitFlag(stream_, staged.flag, staged.flagValue), "cuStreamWaitValue32");
    if (staged.recvBytes > 0) {
      cuda::check(p_.memcpyAsync(staged.devRecv, staged.pinRecv, staged.recvBytes, stream_),
                  "cudaMemcpyAsync (output)");
    }
    cuda::check(p_.eventRecord(staged.evDone, stream_), "cudaEventRecord");
  } catch (...) {
    // Nothing may wait for ever on the flag; the resources stay out of use (the stream may still touch them) and are
    // freed with the communicator.
    release(staged);
    for (auto it = inFlight_.begin(); it != inFlight_.end(); ++it) {
      if (it->first.get() == &staged) {
        inFlight_.erase(it);
        break;
      }
    }
    throw;
  }
}

void DeviceStager::joinCaller(StagedOp& staged) {
  if (!staged.userStream) return;
  DeviceGuard guard(p_, device_);
  cuda::check(p_.streamWaitEvent(staged.userStream, staged.evDone), "cudaStreamWaitEvent (caller's stream)");
}

void DeviceStager::waitStaged(const StagedOp& op, const std::atomic<bool>& abort) const {
  // Spin briefly (the copy is usually done by the time the progress thread gets here), then sleep in steps up
  // to a millisecond: the caller's stream may still have long work ahead of this call.
  auto sleep = std::chrono::microseconds(0);
  for (int pass = 0;; ++pass) {
    int rc = p_.eventQuery(op.evStaged);
    if (rc == 0) return;
    if (rc != cuda::kNotReady) {
      COLLIE_FAIL(ErrorCode::UnhandledCudaError, "copying a device buffer to pinned memory failed: %s",
                  p_.errorString(rc));
    }
    if (abort.load(std::memory_order_relaxed))
      COLLIE_FAIL(ErrorCode::InvalidUsage, "the communicator was aborted while a call waited for its stream");
    if (pass < 64) {
      std::this_thread::yield();
      continue;
    }
    sleep = std::min(std::chrono::microseconds(1000), sleep + std::chrono::microseconds(20));
    std::this_thread::sleep_for(sleep);
  }
}

void DeviceStager::release(StagedOp& op) {
  if (op.released.exchange(true, std::memory_order_acq_rel)) return;
  // Release order: the host collective's writes to the pinned output are visible before the flag is.
  __atomic_store_n(op.flag, op.flagValue, __ATOMIC_RELEASE);
}

void DeviceStager::waitDone(const StagedOp& op) const {
  int rc = p_.eventSynchronize(op.evDone);
  if (rc != 0) {
    COLLIE_FAIL(ErrorCode::UnhandledCudaError, "copying the result back to device memory failed: %s",
                p_.errorString(rc));
  }
}

}  // namespace collie::core
