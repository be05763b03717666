// Argument checks for every call and the buffer extents they share with device staging (see validate.hpp).
// Messages name the argument, the rank and what was expected.
#include "core/validate.hpp"

#include <cstdint>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "core/cuda_plugin.hpp"
#include "core/group.hpp"

namespace collie::core {

using algorithms::Collective;

namespace {

bool overlapsPartially(const void* a, size_t aBytes, const void* b, size_t bBytes, const void* allowed) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  bool overlap = pa < pb + bBytes && pb < pa + aBytes;
  return overlap && a != allowed;
}

}  // namespace

BufferExtent bufferExtent(const OpDesc& op, int rank, int nranks) {
  BufferExtent e;
  const size_t elem = base::dataTypeSize(op.type);
  const size_t n = static_cast<size_t>(nranks < 1 ? 1 : nranks);
  const bool perRankBlocks =
      op.coll == Collective::AllGather || op.coll == Collective::ReduceScatter || op.coll == Collective::AllToAll;
  // Checked products: count x element size (x nranks for the per-rank-block buffers) must fit in size_t, and no
  // buffer can be larger than PTRDIFF_MAX bytes (the largest object C and C++ allow; half the address space).
  constexpr size_t kMaxBuffer = static_cast<size_t>(PTRDIFF_MAX);
  size_t bytes = 0, blocks = 0;
  if (__builtin_mul_overflow(op.count, elem, &bytes) || bytes > kMaxBuffer ||
      (perRankBlocks && (__builtin_mul_overflow(bytes, n, &blocks) || blocks > kMaxBuffer))) {
    COLLIE_FAIL(ErrorCode::InvalidArgument, "%s on rank %d: count=%zu of %s%s overflows the address space",
                algorithms::collectiveName(op.coll), rank, op.count, base::dataTypeName(op.type),
                perRankBlocks ? base::format(" over %d ranks", nranks).c_str() : "");
  }
  e.sendBytes = e.recvBytes = bytes;
  switch (op.coll) {
    case Collective::Broadcast:
      e.send = rank == op.root;
      break;
    case Collective::Reduce:
      e.recv = rank == op.root;
      break;
    case Collective::AllGather:
      e.recvBytes = bytes * n;
      break;
    case Collective::ReduceScatter:
      e.sendBytes = bytes * n;
      break;
    case Collective::AllToAll:
      e.sendBytes = e.recvBytes = bytes * n;
      break;
    case Collective::Send:
      e.recv = false;
      break;
    case Collective::Recv:
      e.send = false;
      break;
    default:
      break;
  }
  return e;
}

void validateOp(const OpDesc& op, int rank, int nranks) {
  const char* what = algorithms::collectiveName(op.coll);
  COLLIE_ARG_CHECK(base::isValidDataType(static_cast<int>(op.type)), "%s on rank %d: datatype=%d is not a collie type",
                   what, rank, static_cast<int>(op.type));
  bool reduces =
      op.coll == Collective::AllReduce || op.coll == Collective::Reduce || op.coll == Collective::ReduceScatter;
  if (reduces) {
    COLLIE_ARG_CHECK(base::isValidReduceOp(static_cast<int>(op.op)), "%s on rank %d: op=%d is not a collie reduction",
                     what, rank, static_cast<int>(op.op));
    if (op.op == ReduceOp::PreMulSum) {
      COLLIE_ARG_CHECK(op.factorType >= 0,
                       "%s on rank %d: op=premulsum without its factor (make it with "
                       "Reduction::preMulSum)",
                       what, rank);
      COLLIE_ARG_CHECK(op.factorType == static_cast<int>(op.type),
                       "%s on rank %d: op=premulsum's factor is %s, the call's datatype is %s (the factor must be one "
                       "element of the call's type)",
                       what, rank, base::dataTypeName(static_cast<DataType>(op.factorType)),
                       base::dataTypeName(op.type));
    }
  }
  bool rooted = op.coll == Collective::Broadcast || op.coll == Collective::Reduce;
  bool p2p = op.coll == Collective::Send || op.coll == Collective::Recv;
  const bool anySource = op.coll == Collective::Recv && op.root == kAnySource;
  if (anySource) {
    COLLIE_USAGE_CHECK(!inGroup(), "%s on rank %d: a receive from any source cannot be part of a group (name its peer)",
                       what, rank);
    COLLIE_USAGE_CHECK(nranks > 1,
                       "%s on rank %d: a receive from any source in a communicator of one rank can never "
                       "complete",
                       what, rank);
  } else if (rooted || p2p) {
    COLLIE_ARG_CHECK(op.root >= 0 && op.root < nranks, "%s on rank %d: %s=%d is outside [0, %d)", what, rank,
                     p2p ? "peer" : "root", op.root, nranks);
  }
  if (p2p && op.root == rank) {
    COLLIE_USAGE_CHECK(inGroup(), "%s on rank %d: a %s to itself outside a group can never complete", what, rank,
                       op.coll == Collective::Send ? "send" : "receive");
  }
  const size_t elem = base::dataTypeSize(op.type);
  const BufferExtent e = bufferExtent(op, rank, nranks);  // throws when count x size (x nranks) overflows
  if (op.count == 0) return;
  const size_t bytes = op.count * elem;
  COLLIE_ARG_CHECK(!e.send || op.send != nullptr, "%s on rank %d: sendbuff is NULL with count=%zu", what, rank,
                   op.count);
  COLLIE_ARG_CHECK(!e.recv || op.recv != nullptr, "%s on rank %d: recvbuff is NULL with count=%zu", what, rank,
                   op.count);
  // A buffer whose last byte lies past the end of the address space cannot exist (and its end would wrap in the
  // overlap check below).
  uintptr_t end = 0;
  COLLIE_ARG_CHECK(!e.send || !__builtin_add_overflow(reinterpret_cast<uintptr_t>(op.send), e.sendBytes, &end),
                   "%s on rank %d: sendbuff=%p + %zu bytes (count=%zu of %s) overflows the address space", what, rank,
                   op.send, e.sendBytes, op.count, base::dataTypeName(op.type));
  COLLIE_ARG_CHECK(!e.recv || !__builtin_add_overflow(reinterpret_cast<uintptr_t>(op.recv), e.recvBytes, &end),
                   "%s on rank %d: recvbuff=%p + %zu bytes (count=%zu of %s) overflows the address space", what, rank,
                   op.recv, e.recvBytes, op.count, base::dataTypeName(op.type));
  if (!e.send || !e.recv) return;

  // Buffers may be the same (in place) but not overlap any other way.
  const size_t sendBytes = e.sendBytes, recvBytes = e.recvBytes;
  const char* inPlace = static_cast<const char*>(op.recv);  // where sendbuff may sit
  if (op.coll == Collective::AllGather) {
    inPlace = static_cast<const char*>(op.recv) + static_cast<size_t>(rank) * bytes;
  } else if (op.coll == Collective::ReduceScatter) {
    inPlace = static_cast<const char*>(op.send) + static_cast<size_t>(rank) * bytes;
  } else if (op.coll == Collective::AllToAll) {
    inPlace = nullptr;
  }
  if (op.coll == Collective::ReduceScatter) {
    COLLIE_ARG_CHECK(!overlapsPartially(op.recv, recvBytes, op.send, sendBytes, inPlace),
                     "%s on rank %d: recvbuff overlaps sendbuff; in place means recvbuff == sendbuff + rank*recvcount",
                     what, rank);
  } else {
    COLLIE_ARG_CHECK(!overlapsPartially(op.send, sendBytes, op.recv, recvBytes, inPlace),
                     "%s on rank %d: sendbuff overlaps recvbuff%s", what, rank,
                     op.coll == Collective::AllGather  ? "; in place means sendbuff == recvbuff + rank*sendcount"
                     : op.coll == Collective::AllToAll ? " (AllToAll is out of place only)"
                                                       : "; in place means sendbuff == recvbuff");
  }
}

// Memory kinds. Host calls in a process without CUDA cost one cheap check (cuda::driverLoaded) and never load the
// CUDA plugin. With a stream, pinned host memory counts as device memory (the device can copy it in stream order);
// without one, only device and managed memory do.
void classifyMemory(OpDesc& op, int rank, int boundDevice) {
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
                what, rank);
  }
  if (hasStream) cuda::requirePlugin(base::format("%s on rank %d: a CUDA stream was passed", what, rank).c_str());
  // classifyMemory runs after validateOp, so the extent cannot overflow; only which buffers count matters here.
  const BufferExtent e = bufferExtent(op, rank, 1);
  const bool needSend = e.send, needRecv = e.recv;
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
                what, rank, cuda::memoryKindName(sendKind, sendDev).c_str(),
                cuda::memoryKindName(recvKind, recvDev).c_str());
  }
  if (!sendOnDevice && !recvOnDevice) {
    if (hasStream) {
      const char* which = needSend ? "sendbuff" : "recvbuff";
      COLLIE_FAIL(ErrorCode::InvalidUsage,
                  "%s on rank %d: a CUDA stream was passed, but %s is pageable host memory (pass NULL as stream for "
                  "host buffers, or pass device or pinned memory)",
                  what, rank, which);
    }
    return;
  }
  int ordinal = sendOnDevice ? sendDev : recvDev;
  if (sendOnDevice && recvOnDevice && sendDev >= 0 && recvDev >= 0 && sendDev != recvDev) {
    COLLIE_FAIL(ErrorCode::InvalidUsage, "%s on rank %d: sendbuff is on GPU %d but recvbuff on GPU %d", what, rank,
                sendDev, recvDev);
  }
  if (ordinal < 0) ordinal = sendOnDevice && sendDev >= 0 ? sendDev : recvDev;
  if (boundDevice >= 0 && ordinal >= 0 && ordinal != boundDevice) {
    COLLIE_FAIL(ErrorCode::InvalidUsage, "%s on rank %d: the buffers are on GPU %d, but this communicator uses GPU %d",
                what, rank, ordinal, boundDevice);
  }
  op.device = true;
  op.deviceOrdinal = ordinal >= 0 ? ordinal : boundDevice;
}

}  // namespace collie::core
