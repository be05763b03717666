// The C API (include/collie/collie.h), built on the C++ API, plus core/api_access.hpp for what the C++ API does not
// offer (calls ordered on a CUDA stream, binding to a GPU, a background failure's message). Every entry point catches
// everything: no exception crosses this boundary. A failure's message is kept in the handle, per communicator
// (collieGetLastError(comm)), and per thread (collieGetLastError(NULL)). Every config goes through one parser
// (parseConfig, capi_config.cpp).
//
// A handle shares ownership of its Communicator (and its last error) with every call in flight, so collieCommAbort
// on one thread can free the handle while a call blocked on another thread unwinds safely. The calls themselves are
// in capi_calls.cpp; what both files share (the handle structs, the error helpers) in capi_handle.hpp.
#include <collie/collie.h>

#include <collie/collie.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "base/errors.hpp"
#include "capi/capi_config.hpp"
#include "capi/capi_handle.hpp"
#include "core/api_access.hpp"

using collie::ErrorCode;
using namespace collie::capi;  // NOLINT(google-build-using-namespace): the C API's shared helpers

namespace collie::capi {

thread_local std::string tlsLastError;

void recordError(const std::shared_ptr<CommShared>& comm, const std::string& message) {
  tlsLastError = message;
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->errorMu);
    comm->lastError = message;
  }
}

collieResult_t argError(const char* message) {
  tlsLastError = message;
  return collieInvalidArgument;
}

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

}  // namespace collie::capi

namespace {

thread_local std::string tlsReturnedError;  // what collieGetLastError(comm) returns: a copy made under the lock

// A new handle owning `created` (out of memory: *out stays NULL and the communicator is destroyed), whose splits
// share its connections by default when `splitShare`.
collieResult_t newHandle(std::unique_ptr<collie::Communicator> created, collieComm_t* out, bool splitShare) {
  return guarded(nullptr, [&] {
    auto handle = std::make_unique<collieComm>();
    handle->splitShare = splitShare;
    handle->shared = std::make_shared<CommShared>(std::move(created));
    *out = handle.release();
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
  handle->splitShare = parsed.splitShareSet && options.shareConnections;
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
    if (r = newHandle(std::move(all[static_cast<size_t>(i)]), &comms[i], false); r != collieSuccess) {
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
  return newHandle(std::move(created), comm, parsed.splitShareSet && options.shareConnections);
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
  collie::Options options = parsed.options;
  if (!parsed.splitShareSet && comm) options.shareConnections = comm->splitShare;  // the parent's config decides
  std::unique_ptr<collie::Communicator> created;
  collieResult_t r = withComm(comm, [&](collie::Communicator& c) { created = c.split(color, key, options); });
  if (r != collieSuccess || !created) return r;
  return newHandle(std::move(created), newcomm, options.shareConnections);
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
  return newHandle(std::move(created), newcomm, false);
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
