// libnccl.so.2, data movement: NCCL's collectives (AllReduce, Broadcast, Bcast, Reduce, AllGather, ReduceScatter,
// AlltoAll, Gather, Scatter), Send/Recv, groups and ncclMemAlloc/ncclMemFree, on collie's C API through the helpers
// of nccl_abi.hpp.
//
// Each call checks its communicator (not finalized), converts the datatype and operator explicitly, and passes
// buffers and the cudaStream_t through to collie: NULL with host buffers is a blocking host call; device buffers
// are enqueued on the stream. Gather and Scatter, which collie's C API lacks, are Send/Recv in one collie group.
// ncclGroupEnd first starts and waits for the inits and splits deferred in the group, then ends collie's group. A call
// that fails inside a group fails the group, as in NCCL: ncclGroupEnd starts none of its inits and splits, issues none
// of its calls and returns the error.
//
// ncclMemAlloc gives device memory (cuMemAlloc on the caller's current context) when the process uses CUDA, else
// page-aligned host memory, since without CUDA no device memory can exist and host memory is what every collie
// call then takes (NULL stream). ncclMemFree tells the two apart by the host allocations it recorded.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "cuda_driver.hpp"
#include "nccl_abi.hpp"

using namespace collie_nccl;

namespace {

constexpr unsigned int kNcclSimInfoMagic = 0x74685283;  // NCCL_SIM_INFO_INITIALIZER's magic
constexpr size_t kHostAllocAlignment = 4096;            // ncclMemAlloc's host memory: page-aligned

std::mutex hostAllocMu;
// ncclMemAlloc's host allocations, for ncclMemFree; never destroyed (as liveComms): a program's static buffer may be
// freed at exit, after this library's statics are gone.
std::unordered_set<void*>& hostAllocs = *new std::unordered_set<void*>;

}  // namespace

// ---- Collectives and point-to-point --------------------------------------------------------------------------------
namespace {

// NCCL's peer is a rank, nothing else: collieRecv would take -1 (COLLIE_ANY_SOURCE) as a receive from any sender.
ncclResult_t checkPeer(ncclComm* comm, const char* fn, collieComm_t c, int peer) {
  int n = 0;
  NCCL_TRY(fromCollie(comm, fn, collieCommCount(c, &n)));
  if (peer < 0 || peer >= n) return fail(comm, ncclInvalidArgument, "%s: peer=%d is not in [0, %d)", fn, peer, n);
  return ncclSuccess;
}

// A data call's body, guarded. As in NCCL, a data call that fails inside a group fails the group, so that the
// outermost ncclGroupEnd issues none of it and returns the error; collie does so for the calls it refuses, this for
// the checks of this layer (collieGroupFail keeps the first failure).
template <typename F>
ncclResult_t dataCall(ncclComm* comm, const char* fn, F&& body) {
  noteGroupCall(comm);
  return failGroupOn(comm, guarded(comm, fn, std::forward<F>(body)));
}

// What every data call does first: the communicator live (not finalized), the datatype converted, for a reduction
// the operator (op: null for calls that do not reduce), for Send/Recv the peer checked; then `call(c, t, o)`, whose
// result is converted.
template <typename F>
ncclResult_t forward(ncclComm* comm, const char* fn, const ncclDataType_t& datatype, const ncclRedOp_t* op, F&& call,
                     std::optional<int> peer = std::nullopt) {
  return dataCall(comm, fn, [&]() -> ncclResult_t {
    collieComm_t c = nullptr;
    collieDataType_t t = collieInt8;
    collieRedOp_t o = collieSum;
    NCCL_TRY(resolveLive(comm, fn, &c));
    NCCL_TRY(toCollieType(comm, fn, datatype, &t));
    if (op) NCCL_TRY(toCollieOp(comm, fn, *op, &o));
    if (peer) NCCL_TRY(checkPeer(comm, fn, c, *peer));
    return fromCollie(comm, fn, call(c, t, o));
  });
}

}  // namespace

NCCL_ABI(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return forward(comm, "ncclReduce", datatype, &op, [&](collieComm_t c, collieDataType_t t, collieRedOp_t o) {
    return collieReduce(sendbuff, recvbuff, count, t, o, root, c, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  return forward(comm, "ncclBcast", datatype, nullptr, [&](collieComm_t c, collieDataType_t t, collieRedOp_t) {
    return collieBroadcast(buff, buff, count, t, root, c, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return forward(comm, "ncclBroadcast", datatype, nullptr, [&](collieComm_t c, collieDataType_t t, collieRedOp_t) {
    return collieBroadcast(sendbuff, recvbuff, count, t, root, c, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return forward(comm, "ncclAllReduce", datatype, &op, [&](collieComm_t c, collieDataType_t t, collieRedOp_t o) {
    return collieAllReduce(sendbuff, recvbuff, count, t, o, c, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return forward(comm, "ncclReduceScatter", datatype, &op, [&](collieComm_t c, collieDataType_t t, collieRedOp_t o) {
    return collieReduceScatter(sendbuff, recvbuff, recvcount, t, o, c, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return forward(comm, "ncclAllGather", datatype, nullptr, [&](collieComm_t c, collieDataType_t t, collieRedOp_t) {
    return collieAllGather(sendbuff, recvbuff, sendcount, t, c, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return forward(comm, "ncclAlltoAll", datatype, nullptr, [&](collieComm_t c, collieDataType_t t, collieRedOp_t) {
    return collieAllToAll(sendbuff, recvbuff, count, t, c, stream);
  });
}

namespace {

// Whether a buffer of `bytes` at p is one collie takes: at most PTRDIFF_MAX bytes, its end within the address space.
bool fitsAddressSpace(const void* p, size_t bytes) {
  uintptr_t end = 0;
  return bytes <= static_cast<size_t>(PTRDIFF_MAX) &&
         !__builtin_add_overflow(reinterpret_cast<uintptr_t>(p), bytes, &end);
}

// Gather and Scatter, which collie's C API lacks: Send/Recv in one group (the root's own block included, unless in
// place), so they work on any buffers collie takes, on the caller's stream, and inside a caller's group.
ncclResult_t rootedExchange(const char* fn, bool gather, const void* sendbuff, void* recvbuff, size_t count,
                            const ncclDataType_t& datatype, int root, ncclComm* comm, cudaStream_t stream) {
  collieComm_t c = nullptr;
  collieDataType_t t = collieInt8;
  NCCL_TRY(resolveLive(comm, fn, &c));
  NCCL_TRY(toCollieType(comm, fn, datatype, &t));
  int n = 0, me = 0;
  NCCL_TRY(fromCollie(comm, fn, collieCommCount(c, &n)));
  NCCL_TRY(fromCollie(comm, fn, collieCommUserRank(c, &me)));
  if (root < 0 || root >= n) return fail(comm, ncclInvalidArgument, "%s: root=%d is not in [0, %d)", fn, root, n);
  const size_t elem = collieTypeSize(t);
  if (count > SIZE_MAX / elem / static_cast<size_t>(n)) {
    return fail(comm, ncclInvalidArgument, "%s: count=%zu overflows (x %zu bytes x %d ranks)", fn, count, elem, n);
  }
  if (count == 0) return ncclSuccess;
  const size_t bytes = count * elem;
  const bool isRoot = me == root;
  // gather: everyone sends sendbuff, the root receives n blocks. scatter: the root sends n blocks, everyone receives.
  const char* blocks = gather ? static_cast<const char*>(recvbuff) : static_cast<const char*>(sendbuff);
  if ((gather ? sendbuff : recvbuff) == nullptr || (isRoot && blocks == nullptr)) {
    return fail(comm, ncclInvalidArgument, "%s on rank %d: %s is NULL with count=%zu", fn, me,
                (gather ? sendbuff : recvbuff) == nullptr ? (gather ? "sendbuff" : "recvbuff")
                                                          : (gather ? "recvbuff" : "sendbuff"),
                count);
  }
  const char* own = gather ? static_cast<const char*>(sendbuff) : static_cast<const char*>(recvbuff);
  const bool inPlace = isRoot && own == blocks + static_cast<size_t>(root) * bytes;
  // collie checks each Send/Recv alone (a refused one fails the whole group); the whole of each buffer is checked
  // first, so that the message names the buffer rather than one block of it.
  const size_t blocksBytes = bytes * static_cast<size_t>(n);
  if (isRoot && !fitsAddressSpace(blocks, blocksBytes)) {
    return fail(comm, ncclInvalidArgument,
                "%s on rank %d: %s=%p + %zu bytes (%d blocks of count=%zu) overflows the address space", fn, me,
                gather ? "recvbuff" : "sendbuff", static_cast<const void*>(blocks), blocksBytes, n, count);
  }
  if (!inPlace && !fitsAddressSpace(own, bytes)) {
    return fail(comm, ncclInvalidArgument, "%s on rank %d: %s=%p + %zu bytes (count=%zu) overflows the address space",
                fn, me, gather ? "sendbuff" : "recvbuff", static_cast<const void*>(own), bytes, count);
  }
  collieResult_t r = collieGroupStart();
  if (r != collieSuccess) return fromCollie(comm, fn, r);
  collieResult_t first = collieSuccess;
  std::string firstMessage;
  auto note = [&](collieResult_t x) {
    if (x != collieSuccess && first == collieSuccess) {
      first = x;
      const char* m = collieGetLastError(nullptr);
      firstMessage = m ? m : "";
    }
  };
  if (gather) {
    if (!inPlace) note(collieSend(sendbuff, count, t, root, c, stream));
    for (int p = 0; isRoot && p < n; ++p) {
      if (p == root && inPlace) continue;
      note(collieRecv(static_cast<char*>(recvbuff) + static_cast<size_t>(p) * bytes, count, t, p, c, stream));
    }
  } else {
    for (int p = 0; isRoot && p < n; ++p) {
      if (p == root && inPlace) continue;
      note(collieSend(static_cast<const char*>(sendbuff) + static_cast<size_t>(p) * bytes, count, t, p, c, stream));
    }
    if (!inPlace) note(collieRecv(recvbuff, count, t, root, c, stream));
  }
  r = collieGroupEnd();  // a refused call failed the group: nothing of it was issued (in the caller's group neither)
  if (first == collieSuccess) return fromCollie(comm, fn, r);
  if (firstMessage.empty()) firstMessage = collieGetErrorString(first);
  return fail(comm, fromCollieCode(first), "%s: %s", fn, firstMessage.c_str());
}

}  // namespace

NCCL_ABI(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return dataCall(comm, "ncclGather", [&] {
    return rootedExchange("ncclGather", true, sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return dataCall(comm, "ncclScatter", [&] {
    return rootedExchange("ncclScatter", false, sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

NCCL_ABI(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  return forward(
      comm, "ncclSend", datatype, nullptr,
      [&](collieComm_t c, collieDataType_t t, collieRedOp_t) {
        return collieSend(sendbuff, count, t, peer, c, stream);
      },
      peer);
}

NCCL_ABI(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  return forward(  // the peer checked: collie would take -1 (COLLIE_ANY_SOURCE) as any sender
      comm, "ncclRecv", datatype, nullptr,
      [&](collieComm_t c, collieDataType_t t, collieRedOp_t) {
        return collieRecv(recvbuff, count, t, peer, c, stream);
      },
      peer);
}

// ---- Groups ---------------------------------------------------------------------------------------------------------
NCCL_ABI(ncclResult_t, ncclGroupStart) {
  collieResult_t r = collieGroupStart();
  if (r != collieSuccess) return fromCollie(nullptr, "ncclGroupStart", r);
  ++groupDepth();
  return ncclSuccess;
}

namespace {

// ncclGroupEnd, also for ncclGroupSimulateEnd (`fn` names the caller).
ncclResult_t endGroup(const char* fn) {
  if (groupDepth() == 0) return fail(nullptr, ncclInvalidUsage, "%s: no group was started (ncclGroupStart)", fn);
  if (--groupDepth() > 0) {
    collieResult_t r = collieGroupEnd();  // nested: the outermost end does the work
    return r == collieSuccess ? ncclSuccess : fromCollie(nullptr, fn, r);
  }
  // As NCCL: a group one of whose calls failed starts none of its inits and splits and issues none of its calls.
  if (takeGroupFailure()) {
    collieResult_t r = collieGroupEnd();  // issues nothing, and returns the first failure
    ncclResult_t code = r != collieSuccess ? fromCollie(nullptr, fn, r)
                                           : fail(nullptr, ncclInternalError, "%s: a call of the group failed", fn);
    abandonDeferred(code, lastError(nullptr));
    return code;
  }
  // Inits and splits first: NCCL does not allow them in one group with calls on the communicators they create. One
  // that fails fails the group: its data calls are not issued (NCCL runs a group's inits first and launches nothing
  // when one fails).
  launchDeferred();
  bool inProgress = false;
  ncclResult_t result = finishDeferred(fn, &inProgress);
  if (result != ncclSuccess) collieGroupFail(static_cast<collieResult_t>(result), lastError(nullptr));
  waitSplitsOfGroupCalls();  // the group's calls come after the splits of their families it started (non-blocking)
  collieResult_t r = collieGroupEnd();
  if (result != ncclSuccess) return result;
  if (r != collieSuccess) return fromCollie(nullptr, fn, r);
  return inProgress ? ncclInProgress : ncclSuccess;
}

}  // namespace

NCCL_ABI(ncclResult_t, ncclGroupEnd) { return endGroup("ncclGroupEnd"); }

NCCL_ABI(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  if (simInfo && (simInfo->magic != kNcclSimInfoMagic || simInfo->size < sizeof(ncclSimInfo_t))) {
    return fail(nullptr, ncclInvalidArgument,
                "ncclGroupSimulateEnd: simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER");
  }
  // NCCL's ends the group without launching it; so does this, failing the group first (nothing in it is issued).
  const char* fn = "ncclGroupSimulateEnd";
  if (groupDepth() == 0) return fail(nullptr, ncclInvalidUsage, "%s: no group was started (ncclGroupStart)", fn);
  const char* why = "collie has no simulation of a group; the group ended without issuing its calls";
  failGroupOn(nullptr, unsupported(nullptr, ncclInvalidUsage, fn, why));
  endGroup(fn);
  return unsupported(nullptr, ncclInvalidUsage, fn, why);  // again: ncclGetLastError says this, not the group's end
}

// ---- Memory ---------------------------------------------------------------------------------------------------------
// Device memory (cuMemAlloc on the caller's current context) when the process uses CUDA; otherwise there can be no
// device memory, and page-aligned host memory is returned, which every collie call takes with a NULL stream.
NCCL_ABI(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  const char* fn = "ncclMemAlloc";
  if (!ptr) return fail(nullptr, ncclInvalidArgument, "%s: ptr is NULL", fn);
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;  // as NCCL (cudaMalloc of 0 bytes): no memory, a NULL pointer
  return guarded(nullptr, fn, [&]() -> ncclResult_t {
    if (collie_nccl::cudaDriverLoaded()) {
      std::string why;
      if (!collie_nccl::cudaDeviceAlloc(ptr, size, &why)) {
        return fail(nullptr, ncclUnhandledCudaError, "%s(%zu bytes): %s", fn, size, why.c_str());
      }
      return ncclSuccess;
    }
    void* p = nullptr;
    int e = posix_memalign(&p, kHostAllocAlignment, size);
    if (e != 0) return fail(nullptr, ncclSystemError, "%s(%zu bytes): %s", fn, size, std::strerror(e));
    std::unique_ptr<void, decltype(&std::free)> owned(p, &std::free);  // freed if the bookkeeping throws
    std::lock_guard<std::mutex> lock(hostAllocMu);
    hostAllocs.insert(p);
    *ptr = owned.release();
    return ncclSuccess;
  });
}

NCCL_ABI(ncclResult_t, ncclMemFree, void* ptr) {
  const char* fn = "ncclMemFree";
  if (!ptr) return ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(hostAllocMu);
    if (hostAllocs.erase(ptr) == 1) {
      std::free(ptr);
      return ncclSuccess;
    }
  }
  if (!collie_nccl::cudaDriverLoaded()) {
    return fail(nullptr, ncclInvalidArgument, "%s: %p was not allocated by ncclMemAlloc", fn, ptr);
  }
  std::string why;
  if (!collie_nccl::cudaDeviceFree(ptr, &why)) return fail(nullptr, ncclUnhandledCudaError, "%s: %s", fn, why.c_str());
  return ncclSuccess;
}
