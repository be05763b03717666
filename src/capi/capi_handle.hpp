// What the C API's two files share (capi.cpp: communicators, errors, queries; capi_calls.cpp: the calls and the
// reductions they name): the structs behind collieComm_t and collieRequest_t, and the helpers every entry point
// runs its body in, so that no exception crosses the C boundary and a failure's message is kept per communicator
// (collieGetLastError(comm)) and per thread (collieGetLastError(NULL)).
#pragma once

#include <collie/collie.h>

#include <collie/collie.hpp>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/api_access.hpp"
#include "core/group.hpp"

namespace collie::capi {

// What a handle shares with every call in flight on it: the communicator, and the last error message of a call on
// it (collieGetLastError(comm)), so that a call unwinding after collieCommAbort freed the handle can still record it.
struct CommShared {
  explicit CommShared(std::unique_ptr<collie::Communicator> c) : comm(std::move(c)) {}
  std::unique_ptr<collie::Communicator> comm;
  std::mutex errorMu;
  std::string lastError;
};

}  // namespace collie::capi

struct collieComm {
  std::mutex mu;
  std::shared_ptr<collie::capi::CommShared> shared;      // null until a non-blocking init finishes
  std::thread initThread;                                // non-blocking init: joined by collieCommDestroy/Abort only
  std::unique_ptr<collie::core::CreationStop> initStop;  // non-blocking init: collieCommAbort ends its waits
  std::condition_variable initCv;                        // notified under mu when initDone turns true
  collieResult_t initResult = collieSuccess;
  std::string initError;
  bool initDone = true;
  // collieCommSplit's splitShare where the split's config leaves it unset: what this communicator's own config set
  // (its init's, or its split's, itself inherited so), as NCCL takes it from the parent's config.
  bool splitShare = false;
  // The reductions made by collieRedOpCreatePreMulSum: op collieNumOps + i is userOps[i]; a destroyed one's index
  // is in freeOps, made again by the next create.
  struct UserOp {
    bool live = true;
    collie::DataType type = collie::DataType::Float32;
    bool immediate = true;  // collieScalarHostImmediate: `value`; collieScalarDevice: read at `where`
    uint64_t value = 0;     // the factor's bytes
    const void* where = nullptr;
  };
  std::mutex opsMu;
  std::vector<UserOp> userOps;
  std::vector<size_t> freeOps;
};

struct collieRequest {
  collie::Work work;
};

namespace collie::capi {

using collie::ErrorCode;

extern thread_local std::string tlsLastError;  // this thread's last failure (collieGetLastError(NULL))

inline collieResult_t toResult(ErrorCode code) { return static_cast<collieResult_t>(code); }

/// Records a failure's message for this thread and, when given, for the communicator.
void recordError(const std::shared_ptr<CommShared>& comm, const std::string& message);

/// Runs `body`, turning exceptions into result codes and recording messages.
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

/// collieInvalidArgument, with `message` as this thread's last error.
collieResult_t argError(const char* message);

/// The communicator of a handle, waiting for a non-blocking init to finish. Any number of threads may wait at once;
/// the init thread is joined only by collieCommDestroy (which Abort ends with), so none of them finds it gone early.
collieResult_t resolve(collieComm_t handle, std::shared_ptr<CommShared>* out);

template <typename F>
collieResult_t withComm(collieComm_t handle, F&& body) {
  std::shared_ptr<CommShared> comm;
  collieResult_t r = resolve(handle, &comm);
  if (r != collieSuccess) return r;
  return guarded(comm, [&] { body(*comm->comm); });
}

/// A collective or point-to-point call: withComm, and a call refused inside a group refuses the group
/// (core/group.hpp), so that collieGroupEnd issues none of it and returns the error, as ncclGroupEnd does.
template <typename F>
collieResult_t callOn(collieComm_t handle, F&& body) {
  const collieResult_t r = withComm(handle, std::forward<F>(body));
  if (r != collieSuccess) collie::core::groupRefuse(static_cast<ErrorCode>(r), tlsLastError);
  return r;
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
inline collie::DataType dt(const collieDataType_t& t) { return static_cast<collie::DataType>(rawEnum(t)); }

}  // namespace collie::capi
