// Argument checks for every call: run before anything is queued or any buffer touched. Messages name the
// argument, the rank and what was expected.
#include <limits>

#include "core/communicator.hpp"
#include "core/cuda_plugin.hpp"
#include "base/errors.hpp"

namespace collie::core {

using algorithms::Collective;

namespace {

bool overlapsPartially(const void* a, size_t aBytes, const void* b, size_t bBytes, const void* allowed) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  bool overlap = pa < pb + bBytes && pb < pa + aBytes;
  return overlap && a != allowed;
}

}  // namespace

void CommImpl::validate(const OpDesc& op) const {
  if (failCode_.load() != ErrorCode::Success) {
    throw Error(failCode_.load(), base::format("%s rank %d failed earlier and cannot be used: %s", name_.c_str(), rank_,
                                         failureMessage().c_str()));
  }
  const char* what = algorithms::collectiveName(op.coll);
  COLLIE_ARG_CHECK(base::isValidDataType(static_cast<int>(op.type)), "%s on rank %d: datatype=%d is not a collie type", what,
                   rank_, static_cast<int>(op.type));
  bool reduces =
      op.coll == Collective::AllReduce || op.coll == Collective::Reduce || op.coll == Collective::ReduceScatter;
  if (reduces) {
    COLLIE_ARG_CHECK(base::isValidReduceOp(static_cast<int>(op.op)), "%s on rank %d: op=%d is not a collie reduction", what,
                     rank_, static_cast<int>(op.op));
  }
  bool rooted = op.coll == Collective::Broadcast || op.coll == Collective::Reduce;
  bool p2p = op.coll == Collective::Send || op.coll == Collective::Recv;
  if (rooted || p2p) {
    COLLIE_ARG_CHECK(op.root >= 0 && op.root < nranks_, "%s on rank %d: %s=%d is outside [0, %d)", what, rank_,
                     p2p ? "peer" : "root", op.root, nranks_);
  }
  if (p2p && op.root == rank_) {
    COLLIE_USAGE_CHECK(inGroup(), "%s on rank %d: a %s to itself outside a group can never complete", what, rank_,
                       op.coll == Collective::Send ? "send" : "receive");
  }
  const size_t elem = base::dataTypeSize(op.type);
  const bool perRankBlocks =
      op.coll == Collective::AllGather || op.coll == Collective::ReduceScatter || op.coll == Collective::AllToAll;
  const size_t factor = perRankBlocks ? static_cast<size_t>(nranks_) : 1;
  COLLIE_ARG_CHECK(op.count <= std::numeric_limits<size_t>::max() / elem / factor,
                   "%s on rank %d: count=%zu overflows (x %zu bytes x %zu blocks)", what, rank_, op.count, elem,
                   factor);
  if (op.count == 0) return;
  const size_t bytes = op.count * elem;

  bool needSend = true, needRecv = true;
  if (op.coll == Collective::Broadcast) needSend = rank_ == op.root;
  if (op.coll == Collective::Reduce) needRecv = rank_ == op.root;
  if (op.coll == Collective::Send) needRecv = false;
  if (op.coll == Collective::Recv) needSend = false;
  COLLIE_ARG_CHECK(!needSend || op.send != nullptr, "%s on rank %d: sendbuff is NULL with count=%zu", what, rank_,
                   op.count);
  COLLIE_ARG_CHECK(!needRecv || op.recv != nullptr, "%s on rank %d: recvbuff is NULL with count=%zu", what, rank_,
                   op.count);
  if (!needSend || !needRecv) return;

  // Buffers may be the same (in place) but not overlap any other way.
  size_t sendBytes = bytes, recvBytes = bytes;
  const char* inPlace = static_cast<const char*>(op.recv);  // where sendbuff may sit
  if (op.coll == Collective::AllGather) {
    recvBytes = bytes * factor;
    inPlace = static_cast<const char*>(op.recv) + static_cast<size_t>(rank_) * bytes;
  } else if (op.coll == Collective::ReduceScatter) {
    sendBytes = bytes * factor;
    inPlace = static_cast<const char*>(op.send) + static_cast<size_t>(rank_) * bytes;
  } else if (op.coll == Collective::AllToAll) {
    sendBytes = recvBytes = bytes * factor;
    inPlace = nullptr;
  }
  if (op.coll == Collective::ReduceScatter) {
    COLLIE_ARG_CHECK(!overlapsPartially(op.recv, recvBytes, op.send, sendBytes, inPlace),
                     "%s on rank %d: recvbuff overlaps sendbuff; in place means recvbuff == sendbuff + rank*recvcount",
                     what, rank_);
  } else {
    COLLIE_ARG_CHECK(!overlapsPartially(op.send, sendBytes, op.recv, recvBytes, inPlace),
                     "%s on rank %d: sendbuff overlaps recvbuff%s", what, rank_,
                     op.coll == Collective::AllGather  ? "; in place means sendbuff == recvbuff + rank*sendcount"
                     : op.coll == Collective::AllToAll ? " (AllToAll is out of place only)"
                                                       : "; in place means sendbuff == recvbuff");
  }
}

// Memory kinds. Host calls in a process without CUDA cost one cheap check (cuda::driverLoaded) and never load the
// CUDA plugin. With a stream, pinned host memory counts as device memory (the device can copy it in stream order);
// without one, only device and managed memory do.
void CommImpl::classifyMemory(OpDesc& op) const {
  op.device = false;
  op.deviceOrdinal = -1;
  const bool hasStream = op.stream != nullptr;
  if (op.count == 0) return;  // nothing moves, on any stream
  if (!hasStream && !cuda::driverLoaded()) return;
  const char* what = algorithms::collectiveName(op.coll);
  if (hasStream && !cuda::driverLoaded()) {
    COLLIE_FAIL(ErrorCode::InvalidUsage,
                "%s on rank %d: a CUDA stream was passed, but this process has not initialised CUDA, so no buffer "
                "can be device memory (pass NULL as stream for host buffers)",
                what, rank_);
  }
  if (hasStream) cuda::requirePlugin(base::format("%s on rank %d: a CUDA stream was passed", what, rank_).c_str());
  bool needSend = true, needRecv = true;
  if (op.coll == Collective::Broadcast) needSend = rank_ == op.root;
  if (op.coll == Collective::Reduce) needRecv = rank_ == op.root;
  if (op.coll == Collective::Send) needRecv = false;
  if (op.coll == Collective::Recv) needSend = false;
  int sendDev = -1, recvDev = -1;
  const int sendKind = needSend ? cuda::memoryKind(op.send, &sendDev) : -1;
  const int recvKind = needRecv ? cuda::memoryKind(op.recv, &recvDev) : -1;
  auto isDevice = [](int kind) { return kind == kCollieCudaMemoryDevice || kind == kCollieCudaMemoryManaged; };
  // Pinned memory goes with the device when a stream was passed or the other buffer is on the device.
  const bool pinnedIsDevice = hasStream || isDevice(sendKind) || isDevice(recvKind);
  auto onDevice = [&](int kind) { return isDevice(kind) || (pinnedIsDevice && kind == kCollieCudaMemoryPinned); };
  const bool sendOnDevice = needSend && onDevice(sendKind);
  const bool recvOnDevice = needRecv && onDevice(recvKind);
  if (needSend && needRecv && sendOnDevice != recvOnDevice) {
    COLLIE_FAIL(ErrorCode::InvalidUsage,
                "%s on rank %d: sendbuff is %s but recvbuff is %s; one call takes host buffers or device buffers, "
                "not both",
                what, rank_, cuda::memoryKindName(sendKind, sendDev).c_str(),
                cuda::memoryKindName(recvKind, recvDev).c_str());
  }
  if (!sendOnDevice && !recvOnDevice) {
    if (hasStream) {
      const char* which = needSend ? "sendbuff" : "recvbuff";
      COLLIE_FAIL(ErrorCode::InvalidUsage,
                  "%s on rank %d: a CUDA stream was passed, but %s is pageable host memory (pass NULL as stream for "
                  "host buffers, or pass device or pinned memory)",
                  what, rank_, which);
    }
    return;
  }
  int ordinal = sendOnDevice ? sendDev : recvDev;
  if (sendOnDevice && recvOnDevice && sendDev >= 0 && recvDev >= 0 && sendDev != recvDev) {
    COLLIE_FAIL(ErrorCode::InvalidUsage, "%s on rank %d: sendbuff is on GPU %d but recvbuff on GPU %d", what, rank_,
                sendDev, recvDev);
  }
  if (ordinal < 0) ordinal = sendOnDevice && sendDev >= 0 ? sendDev : recvDev;
  if (boundDevice_ >= 0 && ordinal >= 0 && ordinal != boundDevice_) {
    COLLIE_FAIL(ErrorCode::InvalidUsage, "%s on rank %d: the buffers are on GPU %d, but this communicator uses GPU %d",
                what, rank_, ordinal, boundDevice_);
  }
  op.device = true;
  op.deviceOrdinal = ordinal >= 0 ? ordinal : boundDevice_;
}

}  // namespace collie::core
