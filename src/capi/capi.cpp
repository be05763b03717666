// The C API (include/collie/collie.h), built on the C++ API, plus core/api_access.hpp for what the C++ API does not
// offer (calls ordered on a CUDA stream, binding to a GPU, a background failure's message). Every entry point catches
// everything: no exception crosses this boundary. A failure's message is kept in the handle, per communicator
// (collieGetLastError(comm)), and per thread (collieGetLastError(NULL)). Every config goes through one parser
// (parseConfig, capi_config.cpp).
//
// A handle shares ownership of its Communicator (and its last error) with every call in flight, so collieCommAbort
// on one thread can free the handle while a call blocked on another thread unwinds safely.
#include <collie/collie.h>

#include <collie/collie.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "capi/capi_config.hpp"
#include "core/api_access.hpp"
#include "core/cuda_plugin.hpp"
#include "core/group.hpp"

using collie::ErrorCode;
using collie::algorithms::Collective;
constexpr collieRedOp_t kNoOp = collieSum;  // for calls that do not reduce

namespace {
// What a handle shares with every call in flight on it: the communicator, and the last error message of a call on
// it (collieGetLastError(comm)), so that a call unwinding after collieCommAbort freed the handle can still record it.
struct CommShared {
  explicit CommShared(std::unique_ptr<collie::Communicator> c) : comm(std::move(c)) {}
  std::unique_ptr<collie::Communicator> comm;
  std::mutex errorMu;
  std::string lastError;
};
}  // namespace

struct collieComm {
  std::mutex mu;
  std::shared_ptr<CommShared> shared;                    // null until a non-blocking init finishes
  std::thread initThread;                                // non-blocking init: joined by collieCommDestroy/Abort only
  std::unique_ptr<collie::core::CreationStop> initStop;  // non-blocking init: collieCommAbort ends its waits
  std::condition_variable initCv;                        // notified under mu when initDone turns true
  collieResult_t initResult = collieSuccess;
  std::string initError;
  bool initDone = true;
  // The reductions made by collieRedOpCreatePreMulSum: op collieNumOps + i is userOps[i] (never reused).
  struct UserOp {
    bool live = true;
    collie::DataType type = collie::DataType::Float32;
    bool immediate = true;  // collieScalarHostImmediate: `value`; collieScalarDevice: read at `where`
    uint64_t value = 0;     // the factor's bytes
    const void* where = nullptr;
  };
  std::mutex opsMu;
  std::vector<UserOp> userOps;
};

struct collieRequest {
  collie::Work work;
};

namespace {

thread_local std::string tlsLastError;
thread_local std::string tlsReturnedError;  // what collieGetLastError(comm) returns: a copy made under the lock

collieResult_t toResult(ErrorCode code) { return static_cast<collieResult_t>(code); }

void recordError(const std::shared_ptr<CommShared>& comm, const std::string& message) {
  tlsLastError = message;
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->errorMu);
    comm->lastError = message;
  }
}

// Runs `body`, turning exceptions into result codes and recording messages.
template <typename F>
collieResult_t guarded(const std::shared_ptr<CommShared>& comm, F&& body) {
  try {
    body();
    return collieSuccess;
  } catch (const collie::Error& e) {
    recordError(comm, e.what());
    return toResult(e.code());
  } catch (const std::bad_alloc&) {
    recordError(comm, "out of memory");
    return collieSystemError;
  } catch (const std::exception& e) {
    recordError(comm, e.what());
    return collieInternalError;
  } catch (...) {
    recordError(comm, "unknown exception");
    return collieInternalError;
  }
}

collieResult_t argError(const char* message) {
  tlsLastError = message;
  return collieInvalidArgument;
}

// The communicator of a handle, waiting for a non-blocking init to finish. Any number of threads may wait at once;
// the init thread is joined only by collieCommDestroy (which Abort ends with), so none of them finds it gone early.
collieResult_t resolve(collieComm_t handle, std::shared_ptr<CommShared>* out) {
  if (!handle) return argError("comm is NULL");
  std::unique_lock<std::mutex> lock(handle->mu);
  handle->initCv.wait(lock, [handle] { return handle->initDone; });
  if (handle->initResult != collieSuccess) {
    tlsLastError = handle->initError;
    return handle->initResult;
  }
  *out = handle->shared;
  if (!*out) return argError("comm was destroyed");
  return collieSuccess;
}

template <typename F>
collieResult_t withComm(collieComm_t handle, F&& body) {
  std::shared_ptr<CommShared> comm;
  collieResult_t r = resolve(handle, &comm);
  if (r != collieSuccess) return r;
  return guarded(comm, [&] { body(*comm->comm); });
}

// A collective or point-to-point call: withComm, and a call refused inside a group refuses the group (core/group.hpp),
// so that collieGroupEnd issues none of it and returns the error, as ncclGroupEnd does.
template <typename F>
collieResult_t callOn(collieComm_t handle, F&& body) {
  const collieResult_t r = withComm(handle, std::forward<F>(body));
  if (r != collieSuccess) collie::core::groupRefuse(static_cast<ErrorCode>(r), tlsLastError);
  return r;
}

// A new handle owning `created` (out of memory: *out stays NULL and the communicator is destroyed).
collieResult_t newHandle(std::unique_ptr<collie::Communicator> created, collieComm_t* out) {
  return guarded(nullptr, [&] {
    auto handle = std::make_unique<collieComm>();
    handle->shared = std::make_shared<CommShared>(std::move(created));
    *out = handle.release();
  });
}

// A C caller may pass any int as an enum (42 as a datatype, say); loading it as the C enum type would be undefined
// behaviour in C++, so the bits are read as an int and validated later on the C++ side (whose enums are int-based).
template <typename E>
int rawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  memcpy(&v, &e, sizeof(v));
  return v;
}
collie::DataType dt(const collieDataType_t& t) { return static_cast<collie::DataType>(rawEnum(t)); }
// The reduction a call names: a built-in op (any other value below collieNumOps is refused by the call's checks), or
// one of the handle's collieRedOpCreatePreMulSum ops, whose factor a collieScalarDevice op reads now.
collie::Reduction reductionOf(collieComm* handle, const collieRedOp_t& o, const collie::Communicator& c) {
  const int raw = rawEnum(o);
  if (raw < collieNumOps) return static_cast<collie::ReduceOp>(raw);
  std::lock_guard<std::mutex> lock(handle->opsMu);
  const size_t i = static_cast<size_t>(raw - collieNumOps);
  COLLIE_ARG_CHECK(
      i < handle->userOps.size() && handle->userOps[i].live,
      "rank %d: op=%d is no reduction op of this communicator (%s)", c.rank(), raw,
      i < handle->userOps.size() ? "destroyed by collieRedOpDestroy" : "not made by collieRedOpCreatePreMulSum on it");
  const collieComm::UserOp& u = handle->userOps[i];
  uint64_t factor = u.value;
  if (!u.immediate) std::memcpy(&factor, u.where, collie::base::dataTypeSize(u.type));
  return collie::Reduction::preMulSum(&factor, u.type);
}

// A call with a stream argument: on host buffers (stream NULL) it blocks until done; on device buffers it is
// enqueued on `stream` (NULL: the default stream) and returns at once (src/core/device_stager.hpp).
collieResult_t streamCall(collieComm_t handle, collieStream_t stream, Collective coll, const void* send, void* recv,
                          size_t count, collie::DataType type, const collieRedOp_t& op, int root) {
  return callOn(handle, [&](collie::Communicator& c) {
    collie::InternalAccess::runOnStream(c, coll, send, recv, count, type, reductionOf(handle, op, c), root, stream);
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

// The config's reading (capi_config.cpp), with its failure's message as this thread's last error.
collieResult_t parseConfig(const collieConfig_t* config, collie::capi::ParsedConfig* out) {
  std::string why;
  const collieResult_t r = collie::capi::parseConfig(config, out, &why);
  if (r != collieSuccess) tlsLastError = why;
  return r;
}

collieResult_t initRank(collieComm_t* out, int nranks, const collieUniqueId& id, int rank,
                        const collieConfig_t* config) {
  if (!out) return argError("comm is NULL");
  *out = nullptr;
  collie::capi::ParsedConfig parsed;
  if (collieResult_t r = parseConfig(config, &parsed); r != collieSuccess) return r;
  const collie::Options options = parsed.options;
  const bool blocking = parsed.blocking;
  collieComm* handle = nullptr;
  if (collieResult_t r = guarded(nullptr, [&] { handle = new collieComm; }); r != collieSuccess) return r;
  collie::UniqueId uid;
  uid.raw = id;
  auto init = [handle, nranks, uid, rank, options] {
    std::shared_ptr<CommShared> comm;
    collieResult_t r = guarded(nullptr, [&] {
      comm = std::make_shared<CommShared>(
          handle->initStop ? collie::InternalAccess::create(nranks, uid, rank, options, *handle->initStop)
                           : collie::Communicator::create(nranks, uid, rank, options));
    });
    std::lock_guard<std::mutex> lock(handle->mu);
    handle->shared = std::move(comm);
    handle->initResult = r;
    if (r != collieSuccess) handle->initError = tlsLastError;
    handle->initDone = true;
    handle->initCv.notify_all();
  };
  if (blocking) {
    init();
    if (handle->initResult != collieSuccess) {
      collieResult_t r = handle->initResult;
      tlsLastError = handle->initError;
      delete handle;
      return r;
    }
    *out = handle;
    return collieSuccess;
  }
  collieResult_t started = guarded(nullptr, [&] {  // no thread (or no memory for its stop): nothing began
    handle->initDone = false;
    handle->initStop = std::make_unique<collie::core::CreationStop>();
    handle->initThread = std::thread(init);
  });
  if (started != collieSuccess) {
    delete handle;
    return started;
  }
  *out = handle;
  return collieInProgress;
}

}  // namespace

extern "C" {

collieResult_t collieGetVersion(int* version) {
  if (!version) return argError("version is NULL");
  *version = COLLIE_VERSION;
  return collieSuccess;
}

collieResult_t collieGetUniqueId(collieUniqueId* uniqueId) {
  if (!uniqueId) return argError("uniqueId is NULL");
  return guarded(nullptr, [&] { *uniqueId = collie::UniqueId::create().raw; });
}

collieResult_t collieUniqueIdToString(const collieUniqueId* uniqueId, char* buf, size_t bufSize) {
  if (!uniqueId || !buf) return argError("uniqueId or buf is NULL");
  if (bufSize < 2 * COLLIE_UNIQUE_ID_BYTES + 1) return argError("buf must hold at least 257 bytes");
  collie::UniqueId id;
  id.raw = *uniqueId;
  std::string s = id.toString();
  memcpy(buf, s.c_str(), s.size() + 1);
  return collieSuccess;
}

collieResult_t collieUniqueIdFromString(const char* str, collieUniqueId* uniqueId) {
  if (!str || !uniqueId) return argError("str or uniqueId is NULL");
  return guarded(nullptr, [&] { *uniqueId = collie::UniqueId::fromString(str).raw; });
}

collieResult_t collieCommInitRank(collieComm_t* comm, int nranks, collieUniqueId commId, int rank) {
  return initRank(comm, nranks, commId, rank, nullptr);
}

collieResult_t collieCommInitRankConfig(collieComm_t* comm, int nranks, collieUniqueId commId, int rank,
                                        collieConfig_t* config) {
  return initRank(comm, nranks, commId, rank, config);
}

collieResult_t collieCommInitAll(collieComm_t* comms, int ndev, const int* devlist) {
  if (!comms) return argError("comms is NULL");
  if (ndev < 1) return argError("ndev must be at least 1");
  for (int i = 0; devlist && i < ndev; ++i)
    if (devlist[i] < 0) return argError("devlist holds a negative device number");
  std::vector<std::unique_ptr<collie::Communicator>> all;
  collieResult_t r = guarded(nullptr, [&] { all = collie::Communicator::createAll(ndev); });
  if (r != collieSuccess) return r;
  for (int i = 0; i < ndev; ++i) {
    if (devlist) collie::InternalAccess::bindDevice(*all[static_cast<size_t>(i)], devlist[i]);  // may share a GPU
    if (r = newHandle(std::move(all[static_cast<size_t>(i)]), &comms[i]); r != collieSuccess) {
      for (int j = 0; j < i; ++j) {  // no half-made set: every peer is aborted
        collieCommAbort(comms[j]);
        comms[j] = nullptr;
      }
      return r;
    }
  }
  return collieSuccess;
}

collieResult_t collieCommInitFromEnv(collieComm_t* comm, collieConfig_t* config) {
  if (!comm) return argError("comm is NULL");
  *comm = nullptr;
  collie::capi::ParsedConfig parsed;  // blocking is not used: the init from the environment always blocks
  if (collieResult_t r = parseConfig(config, &parsed); r != collieSuccess) return r;
  const collie::Options& options = parsed.options;
  std::unique_ptr<collie::Communicator> created;
  collieResult_t r = guarded(nullptr, [&] { created = collie::Communicator::createFromEnv(options); });
  if (r != collieSuccess) return r;
  return newHandle(std::move(created), comm);
}

collieResult_t collieCommDestroy(collieComm_t handle) {
  if (!handle) return collieSuccess;
  std::shared_ptr<CommShared> comm;
  resolve(handle, &comm);
  if (handle->initThread.joinable()) handle->initThread.join();  // done with the handle: it set initDone
  {
    std::lock_guard<std::mutex> lock(handle->mu);
    handle->shared.reset();
  }
  delete handle;
  comm.reset();  // the last owner closes connections once outstanding work is done
  return collieSuccess;
}

collieResult_t collieCommAbort(collieComm_t handle) {
  if (!handle) return collieSuccess;
  collieCommRevoke(handle);
  return collieCommDestroy(handle);
}

collieResult_t collieCommRevoke(collieComm_t handle) {
  if (!handle) return argError("comm is NULL");
  {
    std::lock_guard<std::mutex> lock(handle->mu);
    if (!handle->initDone) handle->initStop->stop();  // a non-blocking init still running fails now (InvalidUsage)
  }
  std::shared_ptr<CommShared> comm;
  resolve(handle, &comm);
  if (comm) comm->comm->abort();
  return collieSuccess;
}

collieResult_t collieCommGetAsyncError(collieComm_t handle, collieResult_t* asyncError) {
  if (!handle || !asyncError) return argError("comm or asyncError is NULL");
  std::lock_guard<std::mutex> lock(handle->mu);
  if (!handle->initDone) {
    *asyncError = collieInProgress;
  } else if (handle->initResult != collieSuccess) {
    *asyncError = handle->initResult;
  } else if (!handle->shared) {
    *asyncError = collieInvalidUsage;
  } else {
    const ErrorCode code = handle->shared->comm->asyncError();
    *asyncError = toResult(code);
    // The failure's own message: no call on comm may have recorded it (async work), and an older one may be there.
    if (code != ErrorCode::Success) {
      std::string why = collie::InternalAccess::coreComm(*handle->shared->comm).failureMessage();
      if (!why.empty()) recordError(handle->shared, why);
    }
  }
  return collieSuccess;
}

collieResult_t collieCommCount(const collieComm_t comm, int* count) {
  if (!count) return argError("count is NULL");
  return withComm(comm, [&](collie::Communicator& c) { *count = c.size(); });
}

collieResult_t collieCommUserRank(const collieComm_t comm, int* rank) {
  if (!rank) return argError("rank is NULL");
  return withComm(comm, [&](collie::Communicator& c) { *rank = c.rank(); });
}

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
    COLLIE_USAGE_CHECK(comm->userOps.size() < static_cast<size_t>(collieMaxRedOp - collieNumOps),
                       "collieRedOpCreatePreMulSum on rank %d: no op value left", c.rank());
    comm->userOps.push_back(u);
    *op = static_cast<collieRedOp_t>(collieNumOps + static_cast<int>(comm->userOps.size() - 1));
  });
}

collieResult_t collieRedOpDestroy(collieRedOp_t op, collieComm_t comm) {
  const int raw = rawEnum(op);
  return withComm(comm, [&](collie::Communicator& c) {
    std::lock_guard<std::mutex> lock(comm->opsMu);
    const size_t i = static_cast<size_t>(raw) - collieNumOps;
    COLLIE_ARG_CHECK(raw >= collieNumOps && i < comm->userOps.size() && comm->userOps[i].live,
                     "collieRedOpDestroy on rank %d: op=%d is %s", c.rank(), raw,
                     raw < collieNumOps         ? "a built-in reduction, which cannot be destroyed"
                     : i < comm->userOps.size() ? "destroyed already"
                                                : "not made by collieRedOpCreatePreMulSum on this communicator");
    comm->userOps[i].live = false;
  });
}

collieResult_t collieCommGetStats(const collieComm_t comm, collieCollStats_t* rows, size_t rowSize, int capacity,
                                  int* count) {
  // The first version's size: a later collie.h may append fields, never remove them.
  constexpr size_t kFirstRowSize = sizeof(collieCollStats_t);
  if (!count) return argError("count is NULL");
  if (rowSize < kFirstRowSize)
    return argError(collie::base::format("rowSize=%zu: expected sizeof(collieCollStats_t), %zu bytes or more", rowSize,
                                         kFirstRowSize)
                        .c_str());
  if (capacity < 0) return argError(collie::base::format("capacity=%d: expected 0 or more", capacity).c_str());
  if (capacity > 0 && !rows) return argError("rows is NULL with a capacity above 0");
  return withComm(comm, [&](collie::Communicator& c) {
    const collie::CommStats stats = c.stats();
    *count = static_cast<int>(stats.rows.size());
    for (size_t i = 0; i < stats.rows.size() && i < static_cast<size_t>(capacity); ++i) {
      const collie::CollectiveStats& r = stats.rows[i];
      auto* at = reinterpret_cast<unsigned char*>(rows) + i * rowSize;
      std::memset(at, 0, rowSize);
      collieCollStats_t& out = *reinterpret_cast<collieCollStats_t*>(at);
      std::snprintf(out.collective, sizeof(out.collective), "%s", r.collective.c_str());
      std::snprintf(out.algorithm, sizeof(out.algorithm), "%s", r.algorithm.c_str());
      out.calls = r.calls;
      out.bytes = r.bytes;
      out.seconds = r.seconds;
    }
  });
}

collieResult_t collieCommSplit(collieComm_t comm, int color, int key, collieComm_t* newcomm, collieConfig_t* config) {
  if (!newcomm) return argError("newcomm is NULL");
  *newcomm = nullptr;
  collie::capi::ParsedConfig parsed;  // blocking is not used: split always blocks
  if (collieResult_t r = parseConfig(config, &parsed); r != collieSuccess) return r;
  const collie::Options& options = parsed.options;
  std::unique_ptr<collie::Communicator> created;
  collieResult_t r = withComm(comm, [&](collie::Communicator& c) { created = c.split(color, key, options); });
  if (r != collieSuccess || !created) return r;
  return newHandle(std::move(created), newcomm);
}

collieResult_t collieCommShrink(collieComm_t comm, const int* excludeRanks, int excludeCount, collieComm_t* newcomm) {
  return collieCommShrinkConfig(comm, excludeRanks, excludeCount, newcomm, nullptr);
}

collieResult_t collieCommShrinkConfig(collieComm_t comm, const int* excludeRanks, int excludeCount,
                                      collieComm_t* newcomm, collieConfig_t* config) {
  if (!newcomm) return argError("newcomm is NULL");
  *newcomm = nullptr;
  if (excludeCount < 0) return argError("excludeCount is negative");
  if (excludeCount > 0 && !excludeRanks) return argError("excludeRanks is NULL but excludeCount > 0");
  collie::capi::ParsedConfig parsed;  // blocking is not used: shrink always blocks
  if (collieResult_t r = parseConfig(config, &parsed); r != collieSuccess) return r;
  if (parsed.options.shareConnections)
    return argError("config->splitShare=1: a shrunk communicator shares no connection with its parent");
  std::span<const int> exclude(excludeRanks, static_cast<size_t>(excludeCount));
  std::unique_ptr<collie::Communicator> created;
  collieResult_t r = withComm(comm, [&](collie::Communicator& c) { created = c.shrink(exclude, parsed.options); });
  if (r != collieSuccess) return r;
  return newHandle(std::move(created), newcomm);
}

const char* collieGetErrorString(collieResult_t result) {
  return collie::base::errorCodeName(static_cast<ErrorCode>(result));
}

// The communicator's message is copied while its lock is held: another thread's failure may replace it at once.
const char* collieGetLastError(collieComm_t handle) {
  if (handle) {
    std::lock_guard<std::mutex> lock(handle->mu);
    if (handle->shared) {
      CommShared& shared = *handle->shared;
      std::lock_guard<std::mutex> lock2(shared.errorMu);
      if (!shared.lastError.empty()) {
        tlsReturnedError = shared.lastError;
        return tlsReturnedError.c_str();
      }
    } else if (!handle->initError.empty()) {
      tlsReturnedError = handle->initError;
      return tlsReturnedError.c_str();
    }
  }
  return tlsLastError.c_str();
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
    return c.allReduceAsync(sendbuff, recvbuff, count, dt(datatype), reductionOf(comm, op, c));
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
    return c.reduceAsync(sendbuff, recvbuff, count, dt(datatype), reductionOf(comm, op, c), root);
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
    return c.reduceScatterAsync(sendbuff, recvbuff, recvcount, dt(datatype), reductionOf(comm, op, c));
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

// ---- C++ access to a C handle (collie.hpp) -------------------------------------------------------------------------

collie::CallInfo collie::lastCallOf(collieComm_t handle) {
  if (!handle) return {};
  std::shared_ptr<CommShared> shared;
  {
    std::lock_guard<std::mutex> lock(handle->mu);
    shared = handle->shared;
  }
  return shared && shared->comm ? shared->comm->lastCall() : collie::CallInfo{};
}
