// The C API's calls (include/collie/collie.h): collectives, point-to-point, groups, requests, and the reductions a
// call names (collieRedOpCreatePreMulSum's ops, per communicator). Each runs in callOn (capi_handle.hpp): a failure
// becomes a result code with its message, and a call refused inside a group refuses the group.
#include <collie/collie.h>

#include <collie/collie.hpp>
#include <cstring>
#include <mutex>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "capi/capi_handle.hpp"
#include "core/api_access.hpp"
#include "core/cuda_plugin.hpp"
#include "core/group.hpp"

using collie::algorithms::Collective;
using namespace collie::capi;  // NOLINT(google-build-using-namespace): the C API's shared helpers

namespace {

constexpr collieRedOp_t kNoOp = collieSum;  // for calls that do not reduce

// One of the handle's collieRedOpCreatePreMulSum ops (`raw` >= collieNumOps), whose factor a collieScalarDevice op
// reads now; `call` names the call in an error ("AllReduce", "ReduceAsync": without "collie").
collie::Reduction userReduction(collieComm* handle, int raw, const collie::Communicator& c, const char* call) {
  std::lock_guard<std::mutex> lock(handle->opsMu);
  const size_t i = static_cast<size_t>(raw - collieNumOps);
  COLLIE_ARG_CHECK(
      i < handle->userOps.size() && handle->userOps[i].live,
      "collie%s on rank %d: op=%d is no reduction op of this communicator (%s)", call, c.rank(), raw,
      i < handle->userOps.size() ? "destroyed by collieRedOpDestroy" : "not made by collieRedOpCreatePreMulSum on it");
  const collieComm::UserOp& u = handle->userOps[i];
  uint64_t factor = u.value;
  if (!u.immediate) std::memcpy(&factor, u.where, collie::base::dataTypeSize(u.type));
  return collie::Reduction::preMulSum(&factor, u.type);
}

// The reduction a call names: a built-in op (any other value below collieNumOps is refused by the call's checks), or
// one of the handle's ops (userReduction; `call()` names the call, asked only then).
template <typename Name>
collie::Reduction reductionOf(collieComm* handle, const collieRedOp_t& o, const collie::Communicator& c, Name call) {
  const int raw = rawEnum(o);
  if (raw < collieNumOps) [[likely]]
    return static_cast<collie::ReduceOp>(raw);
  return userReduction(handle, raw, c, call());
}

// A call with a stream argument: on host buffers (stream NULL) it blocks until done; on device buffers it is
// enqueued on `stream` (NULL: the default stream) and returns at once (src/core/device_stager.hpp).
collieResult_t streamCall(collieComm_t handle, collieStream_t stream, Collective coll, const void* send, void* recv,
                          size_t count, collie::DataType type, const collieRedOp_t& op, int root) {
  return callOn(handle, [&](collie::Communicator& c) {
    collie::InternalAccess::runOnStream(
        c, coll, send, recv, count, type,
        reductionOf(handle, op, c, [coll] { return collie::algorithms::collectiveName(coll); }), root, stream);
  });
}

template <typename F>
collieResult_t asyncCall(collieComm_t handle, collieRequest_t* request, F&& start) {
  if (request) *request = nullptr;
  return callOn(handle, [&](collie::Communicator& c) {
    COLLIE_ARG_CHECK(request != nullptr, "request is NULL");
    *request = new collieRequest{start(c)};
  });
}

}  // namespace

extern "C" {

collieResult_t collieRedOpCreatePreMulSum(collieRedOp_t* op, void* scalar, collieDataType_t datatype,
                                          collieScalarResidence_t residence, collieComm_t comm) {
  if (!op) return argError("collieRedOpCreatePreMulSum: op is NULL");
  if (!scalar) return argError("collieRedOpCreatePreMulSum: scalar is NULL");
  const int type = rawEnum(datatype), where = rawEnum(residence);
  return withComm(comm, [&](collie::Communicator& c) {
    COLLIE_ARG_CHECK(collie::base::isValidDataType(type),
                     "collieRedOpCreatePreMulSum on rank %d: datatype=%d is not a collie type", c.rank(), type);
    COLLIE_ARG_CHECK(where == collieScalarDevice || where == collieScalarHostImmediate,
                     "collieRedOpCreatePreMulSum on rank %d: residence=%d is neither collieScalarDevice (0) nor "
                     "collieScalarHostImmediate (1)",
                     c.rank(), where);
    collieComm::UserOp u;
    u.type = static_cast<collie::DataType>(type);
    u.immediate = where == collieScalarHostImmediate;
    if (u.immediate) {
      std::memcpy(&u.value, scalar, collie::base::dataTypeSize(u.type));
    } else {
      int device = -1;
      const int kind = collie::core::cuda::driverLoaded() ? collie::core::cuda::memoryKind(scalar, &device) : -1;
      COLLIE_USAGE_CHECK(
          kind != kCollieCudaMemoryDevice,
          "collieRedOpCreatePreMulSum on rank %d: the collieScalarDevice scalar is in GPU %d's memory; collie "
          "reads it from host memory only (a factor read by the GPU in stream order is not built: collie "
          "has not run on a GPU); pass collieScalarHostImmediate or a host pointer",
          c.rank(), device);
      u.where = scalar;
    }
    std::lock_guard<std::mutex> lock(comm->opsMu);
    size_t i = comm->userOps.size();
    if (!comm->freeOps.empty()) {  // a destroyed op's value is made again, as NCCL's are (ProcessGroupNCCL makes and
      i = comm->freeOps.back();    // destroys one per PREMUL_SUM call: the table must not grow with them)
      comm->freeOps.pop_back();
      comm->userOps[i] = u;
    } else {
      COLLIE_USAGE_CHECK(i < static_cast<size_t>(collieMaxRedOp - collieNumOps),
                         "collieRedOpCreatePreMulSum on rank %d: no op value left", c.rank());
      comm->userOps.push_back(u);
    }
    const int made = collieNumOps + static_cast<int>(i);
    std::memcpy(op, &made, sizeof made);
  });
}

collieResult_t collieRedOpDestroy(collieRedOp_t op, collieComm_t comm) {
  const int raw = rawEnum(op);
  return withComm(comm, [&](collie::Communicator& c) {
    std::lock_guard<std::mutex> lock(comm->opsMu);
    const size_t i = static_cast<size_t>(raw) - collieNumOps;
    COLLIE_ARG_CHECK(raw >= collieNumOps && i < comm->userOps.size() && comm->userOps[i].live,
                     "collieRedOpDestroy on rank %d: op=%d is %s", c.rank(), raw,
                     raw < 0                    ? "not a reduction op"
                     : raw < collieNumOps       ? "a built-in reduction, which cannot be destroyed"
                     : i < comm->userOps.size() ? "destroyed already"
                                                : "not made by collieRedOpCreatePreMulSum on this communicator");
    comm->userOps[i].live = false;
    comm->freeOps.push_back(i);
  });
}

collieResult_t collieAllReduce(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                               collieRedOp_t op, collieComm_t comm, collieStream_t stream) {
  return streamCall(comm, stream, Collective::AllReduce, sendbuff, recvbuff, count, dt(datatype), op, 0);
}

collieResult_t collieBroadcast(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype, int root,
                               collieComm_t comm, collieStream_t stream) {
  return streamCall(comm, stream, Collective::Broadcast, sendbuff, recvbuff, count, dt(datatype), kNoOp, root);
}

collieResult_t collieReduce(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                            collieRedOp_t op, int root, collieComm_t comm, collieStream_t stream) {
  return streamCall(comm, stream, Collective::Reduce, sendbuff, recvbuff, count, dt(datatype), op, root);
}

collieResult_t collieAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, collieDataType_t datatype,
                               collieComm_t comm, collieStream_t stream) {
  return streamCall(comm, stream, Collective::AllGather, sendbuff, recvbuff, sendcount, dt(datatype), kNoOp, 0);
}

collieResult_t collieReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, collieDataType_t datatype,
                                   collieRedOp_t op, collieComm_t comm, collieStream_t stream) {
  return streamCall(comm, stream, Collective::ReduceScatter, sendbuff, recvbuff, recvcount, dt(datatype), op, 0);
}

collieResult_t collieAllToAll(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                              collieComm_t comm, collieStream_t stream) {
  return streamCall(comm, stream, Collective::AllToAll, sendbuff, recvbuff, count, dt(datatype), kNoOp, 0);
}

collieResult_t collieSend(const void* sendbuff, size_t count, collieDataType_t datatype, int peer, collieComm_t comm,
                          collieStream_t stream) {
  return streamCall(comm, stream, Collective::Send, sendbuff, nullptr, count, dt(datatype), kNoOp, peer);
}

collieResult_t collieRecv(void* recvbuff, size_t count, collieDataType_t datatype, int peer, collieComm_t comm,
                          collieStream_t stream) {
  return streamCall(comm, stream, Collective::Recv, nullptr, recvbuff, count, dt(datatype), kNoOp, peer);
}

static_assert(COLLIE_ANY_SOURCE == collie::kAnySource);

collieResult_t collieRecvAny(void* recvbuff, size_t count, collieDataType_t datatype, int* source, collieComm_t comm) {
  if (source) *source = -1;
  return callOn(comm, [&](collie::Communicator& c) {
    COLLIE_ARG_CHECK(source != nullptr, "collieRecvAny on rank %d: source is NULL", c.rank());
    *source = c.recvAny(recvbuff, count, dt(datatype));
  });
}

collieResult_t collieBarrier(collieComm_t comm) {
  return callOn(comm, [&](collie::Communicator& c) { c.barrier(); });
}

collieResult_t collieGroupStart(void) {
  return guarded(nullptr, [] { collie::groupStart(); });
}

collieResult_t collieGroupEnd(void) {
  return guarded(nullptr, [] { collie::groupEnd(); });
}

collieResult_t collieGroupFail(collieResult_t code, const char* why) {
  const int raw = rawEnum(code);
  return guarded(nullptr, [&] {
    // groupFail refuses any code that is no failure: Success, InProgress, or none of collieResult_t's
    collie::groupFail(static_cast<ErrorCode>(raw), why ? why : "collieGroupFail");
  });
}

collieResult_t collieAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                                    collieRedOp_t op, collieComm_t comm, collieRequest_t* request) {
  return asyncCall(comm, request, [&](collie::Communicator& c) {
    return c.allReduceAsync(sendbuff, recvbuff, count, dt(datatype),
                            reductionOf(comm, op, c, [] { return "AllReduceAsync"; }));
  });
}

collieResult_t collieBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                                    int root, collieComm_t comm, collieRequest_t* request) {
  return asyncCall(comm, request, [&](collie::Communicator& c) {
    return c.broadcastAsync(sendbuff, recvbuff, count, dt(datatype), root);
  });
}

collieResult_t collieReduceAsync(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                                 collieRedOp_t op, int root, collieComm_t comm, collieRequest_t* request) {
  return asyncCall(comm, request, [&](collie::Communicator& c) {
    return c.reduceAsync(sendbuff, recvbuff, count, dt(datatype),
                         reductionOf(comm, op, c, [] { return "ReduceAsync"; }), root);
  });
}

collieResult_t collieAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount, collieDataType_t datatype,
                                    collieComm_t comm, collieRequest_t* request) {
  return asyncCall(comm, request, [&](collie::Communicator& c) {
    return c.allGatherAsync(sendbuff, recvbuff, sendcount, dt(datatype));
  });
}

collieResult_t collieReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        collieDataType_t datatype, collieRedOp_t op, collieComm_t comm,
                                        collieRequest_t* request) {
  return asyncCall(comm, request, [&](collie::Communicator& c) {
    return c.reduceScatterAsync(sendbuff, recvbuff, recvcount, dt(datatype),
                                reductionOf(comm, op, c, [] { return "ReduceScatterAsync"; }));
  });
}

collieResult_t collieAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                                   collieComm_t comm, collieRequest_t* request) {
  return asyncCall(comm, request,
                   [&](collie::Communicator& c) { return c.allToAllAsync(sendbuff, recvbuff, count, dt(datatype)); });
}

collieResult_t collieWait(collieRequest_t request) {
  if (!request) return argError("request is NULL");
  return guarded(nullptr, [&] { request->work.wait(); });
}

collieResult_t collieTest(collieRequest_t request, int* done) {
  if (!request || !done) return argError("request or done is NULL");
  return guarded(nullptr, [&] {
    *done = request->work.test() ? 1 : 0;
    if (*done) request->work.wait();  // rethrows the failure, if any
  });
}

collieResult_t collieRequestFree(collieRequest_t request) {
  if (!request) return collieSuccess;
  if (request->work.valid()) {
    try {
      request->work.wait();  // its result was (or can no longer be) reported by collieWait / collieTest
    } catch (...) {
    }
  }
  delete request;
  return collieSuccess;
}

}  // extern "C"
