// Device buffers, staged through pinned host memory: the simple, correct path for collectives on GPU memory,
// with NCCL's stream semantics, over any transport.
//
// A call on device buffers (src/core/communicator.cpp, runDevice) is enqueued on the caller's thread and returns
// at once; inside a group, at the group's end (CommImpl::submitBatch, as NCCL enqueues a group at ncclGroupEnd), so
// that a group refused there leaves the streams and buffers untouched. On a stream of the communicator's own
// (non-blocking, so the legacy default stream never waits on it):
//   1. wait for an event recorded on the caller's stream      (the input is ready in stream order)
//   2. copy the input, device -> pinned host                  (then event `staged`)
//   3. wait until a flag word in pinned memory reaches a value  (cuStreamWaitValue32; the host collective is done)
//   4. copy the output, pinned host -> device                  (then event `done`)
// and the caller's stream waits for `done`. The progress thread, in call order, waits for `staged`, runs the
// host collective on the pinned buffers with the ordinary executor, and stores the flag value, which lets step 3
// pass. It stores it after a failure too, so that no stream waits for ever; the failure is then recorded on the
// communicator (collieCommGetAsyncError, and the next call).
//
// Calls through the C++ API (which has no stream) use the legacy default stream for step 1 and do not make any
// stream wait for `done`: their completion (the blocking call's return, a Work) waits for `done` instead.
//
// Resources (pinned blocks, events, flag words) are reused once a call's `done` event has passed, and freed when
// the communicator is destroyed, never earlier: freeing pinned memory synchronises the whole device, which could
// deadlock with ranks of the same process whose streams wait on a flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/cuda_plugin.hpp"

namespace collie::core {

struct OpDesc;

/// One call on device buffers in flight.
struct StagedOp {
  void* evInput = nullptr;   ///< recorded on the caller's stream
  void* evStaged = nullptr;  ///< the input is in pinned memory
  void* evDone = nullptr;    ///< the output is back in device memory
  uint32_t* flag = nullptr;  ///< released by storing flagValue
  uint32_t flagValue = 0;
  std::atomic<bool> released{false};
  bool waitCopyBack = false;  ///< the call's completion waits for evDone (C++ API calls)
  // What stageOutput needs (set by stageInput).
  void* userStream = nullptr;
  char* devRecv = nullptr;
  const char* pinRecv = nullptr;
  size_t recvBytes = 0;
  struct Block {
    char* ptr = nullptr;
    size_t bytes = 0;
  };
  Block blocks[2];
};

class DeviceStager {
 public:
  /// Creates the stream on `device` (the caller's current device when -1).
  DeviceStager(const CollieCudaPlugin& plugin, int device);
  /// Waits for the stream, then frees everything. Every staged call must have been released.
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  int device() const { return device_; }

  /// On the caller's thread (one at a time): enqueues steps 1-4 for op, makes `userStream` wait for the end when
  /// `streamOrdered`, and points op's buffers at the pinned copies. Throws UnhandledCudaError (after releasing
  /// anything already enqueued) when CUDA fails. stageInput then stageOutput.
  std::shared_ptr<StagedOp> stage(OpDesc& op, int rank, int nranks, void* userStream, bool streamOrdered);
  /// Steps 1-2 of `op` (the input to pinned memory), pointing op's buffers at the pinned copies. A batch of calls
  /// that runs as one (a group's) stages every input before any output: the progress thread waits for all of its
  /// inputs before it runs any, and one stream holds them, so a call's input must not queue behind another call's
  /// wait for its flag (step 3).
  std::shared_ptr<StagedOp> stageInput(OpDesc& op, int rank, int nranks, void* userStream, bool streamOrdered);
  /// Steps 3-4 of a call whose input stageInput enqueued. On a CUDA failure it releases the call (nothing waits for
  /// ever) and throws UnhandledCudaError. A call whose output copy is enqueued has its receive buffer written even if
  /// it is dropped later (a CUDA failure staging another call of its batch): its content is then undefined.
  void stageOutput(StagedOp& staged);
  /// Makes the caller's stream wait for the end of a streamOrdered call (nothing for the others). A group does it once
  /// every batch of the group is staged: two communicators' calls in one group on one stream would otherwise make the
  /// second's input wait for the first's end, which needs the second.
  void joinCaller(StagedOp& staged);
  /// On the progress thread: waits until the input is in pinned memory; throws when abort is set or CUDA fails.
  void waitStaged(const StagedOp& op, const std::atomic<bool>& abort) const;
  /// On the progress thread: lets the copy-back run (after the host collective, or after a failure). Idempotent.
  static void release(StagedOp& op);
  /// Waits until the output is back in device memory.
  void waitDone(const StagedOp& op) const;

 private:
  StagedOp::Block acquireBlock(size_t bytes);
  void* acquireEvent();
  uint32_t* acquireFlag(uint32_t* value);
  void reclaim();  // returns the resources of finished calls

  const CollieCudaPlugin& p_;
  int device_ = -1;
  void* stream_ = nullptr;
  std::vector<StagedOp::Block> freeBlocks_, allBlocks_;
  std::vector<void*> freeEvents_, allEvents_;
  struct Flag {
    uint32_t* word;
    uint32_t next;  // the value its next use waits for
  };
  std::vector<Flag> freeFlags_;
  std::vector<void*> flagChunks_;
  std::deque<std::pair<std::shared_ptr<StagedOp>, Flag>> inFlight_;
};

}  // namespace collie::core
