// Argument checks for every call, run before anything is queued or any buffer touched, and the one computation
// of which buffers a call reads and writes on a rank and how many bytes of each (bufferExtent), shared by those
// checks and by device staging (device_stager.cpp copies exactly these extents).
#pragma once

#include <cstddef>

#include "core/op_desc.hpp"

namespace collie::core {

/// Which buffers a call reads and writes on one rank, and how many bytes of each.
struct BufferExtent {
  bool send = true;  ///< the rank reads sendbuff
  bool recv = true;  ///< the rank writes recvbuff
  size_t sendBytes = 0;
  size_t recvBytes = 0;
};

/// The extents of op on `rank` of `nranks`; throws InvalidArgument, naming count, type and nranks, when count x
/// element size (x nranks for AllGather recv, ReduceScatter send, AllToAll) overflows or exceeds PTRDIFF_MAX.
BufferExtent bufferExtent(const OpDesc& op, int rank, int nranks);

/// Throws InvalidArgument / InvalidUsage, naming the argument, the rank and what was expected.
void validateOp(const OpDesc& op, int rank, int nranks);

/// Sets op.device and op.deviceOrdinal from the buffers' memory kinds (loading the CUDA plugin only when a stream
/// was passed or CUDA is in use in this process); throws InvalidUsage, naming the buffer, for host and device
/// buffers mixed in one call, a stream with pageable host buffers, or buffers on a GPU other than `boundDevice`
/// (-1: any).
void classifyMemory(OpDesc& op, int rank, int boundDevice);

}  // namespace collie::core
