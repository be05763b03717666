// libnccl.so.2: NCCL's C API, with NCCL's own struct sizes and enum values, implemented on collie's public C API.
//
// Compiled against the CUDA toolkit's nccl.h (so every signature, enum value and struct layout is NCCL's by
// construction) and against <collie/collie.h> only: nothing of collie's internals is used, and libcollie.so does
// the work. Each NCCL entry point ncclX is a weak symbol with a strong alias pncclX, as in NCCL itself, so that a
// profiling library can interpose ncclX and call pncclX.
//
// Handles. ncclComm_t points at a struct ncclComm of our own that wraps a collieComm_t, plus what NCCL has and
// collie's C API does not: the CUDA device the communicator was created for, whether its config asked for
// non-blocking calls, ncclCommFinalize's state, registration handles, the last error message, and an init or
// split deferred to the end of the group it was called in. ncclUniqueId and collieUniqueId are both 128 opaque
// bytes (static_asserts below); the bytes are copied as they are.
//
// Types. ncclDataType_t, ncclRedOp_t and ncclResult_t have the same values as collie's for everything collie has
// (static_asserts below), but every value is still converted by an explicit switch, read as a plain int first
// (a C caller may pass any int). fp8 types (ncclFloat8e4m3, ncclFloat8e5m2) are rejected with ncclInvalidArgument
// and a message; custom reduction operators (ncclRedOpCreatePreMulSum) are collie's, whose values are NCCL's.
// collieTimeout, collie's own code after NCCL's last, becomes ncclRemoteError (a peer that stopped answering), its
// message kept.
//
// Streams. The cudaStream_t of each call is passed through to collie: NULL with host buffers is a blocking host
// call; device buffers are enqueued on the stream (collie stages them through pinned host memory).
//
// Groups. ncclGroupStart/End map to collieGroupStart/End (collectives and Send/Recv of the group are issued
// together at the outermost end). ncclCommInitRank* and ncclCommSplit called inside a group are deferred as in NCCL:
// each is recorded, and the outermost ncclGroupEnd starts them all (an init as collie's non-blocking init, a split on
// a thread of its own) and waits for them (for communicators whose config is blocking; for non-blocking ones it
// returns ncclInProgress while any is still running), so that one thread can create several ranks of one
// communicator; when a call of the group failed, it starts none of them.
//
// Errors. Every failure leaves a message for ncclGetLastError: per thread, and per communicator when the call had
// one (ncclGetLastError(comm) returns the communicator's last message, else the thread's). No exception crosses
// this boundary.
//
// What is not supported (each entry point still exists, returns an error and says why) is listed, one function a
// line with the reason, in unsupported.txt next to this file; tests/nccl/check_exports.py holds this library to it.
//
// Files: this one holds the ABI facts (static_asserts) and the helpers every entry point uses (nccl_abi.hpp
// declares them); nccl_group.cpp the group state and the inits and splits deferred to a group's end; nccl_comm.cpp
// the communicator entry points, errors and registration; nccl_coll.cpp the collectives, point-to-point, the group
// entry points and ncclMemAlloc; cuda_driver.cpp the little of CUDA the layer needs.
#include "nccl_abi.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

// ---- ABI facts this layer relies on ---------------------------------------------------------------------------
static_assert(sizeof(ncclUniqueId) == sizeof(collieUniqueId), "ncclUniqueId and collieUniqueId differ in size");
static_assert(NCCL_UNIQUE_ID_BYTES == COLLIE_UNIQUE_ID_BYTES, "unique id byte counts differ");
static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
                  sizeof(ncclRedOp_t) == sizeof(int) && sizeof(collieResult_t) == sizeof(int) &&
                  sizeof(collieDataType_t) == sizeof(int) && sizeof(collieRedOp_t) == sizeof(int),
              "NCCL's and collie's enums are int-sized");
static_assert(static_cast<int>(ncclSuccess) == collieSuccess &&
                  static_cast<int>(ncclUnhandledCudaError) == collieUnhandledCudaError &&
                  static_cast<int>(ncclSystemError) == collieSystemError &&
                  static_cast<int>(ncclInternalError) == collieInternalError &&
                  static_cast<int>(ncclInvalidArgument) == collieInvalidArgument &&
                  static_cast<int>(ncclInvalidUsage) == collieInvalidUsage &&
                  static_cast<int>(ncclRemoteError) == collieRemoteError &&
                  static_cast<int>(ncclInProgress) == collieInProgress &&
                  static_cast<int>(ncclNumResults) == collieTimeout,
              "collie's result codes 0..7 are NCCL's; collieTimeout is the first value after NCCL's");
static_assert(static_cast<int>(ncclInt8) == collieInt8 && static_cast<int>(ncclUint8) == collieUint8 &&
                  static_cast<int>(ncclInt32) == collieInt32 && static_cast<int>(ncclUint32) == collieUint32 &&
                  static_cast<int>(ncclInt64) == collieInt64 && static_cast<int>(ncclUint64) == collieUint64 &&
                  static_cast<int>(ncclFloat16) == collieFloat16 && static_cast<int>(ncclFloat32) == collieFloat32 &&
                  static_cast<int>(ncclFloat64) == collieFloat64 && static_cast<int>(ncclBfloat16) == collieBfloat16,
              "collie's datatypes have NCCL's values");
static_assert(static_cast<int>(ncclNumTypes) > collieNumTypes, "NCCL has types collie lacks (fp8)");
static_assert(static_cast<int>(ncclSum) == collieSum && static_cast<int>(ncclProd) == collieProd &&
                  static_cast<int>(ncclMax) == collieMax && static_cast<int>(ncclMin) == collieMin &&
                  static_cast<int>(ncclAvg) == collieAvg && static_cast<int>(ncclNumOps) == collieNumOps,
              "collie's reduction operators have NCCL's values");
static_assert(NCCL_SPLIT_NOCOLOR == COLLIE_SPLIT_NOCOLOR, "split no-color values differ");
static_assert(NCCL_CONFIG_UNDEF_INT == COLLIE_CONFIG_UNDEF_INT, "undefined-config values differ");
// The fixed head of every ncclConfig_t version (what is checked before `size` says how much more there is).
static_assert(offsetof(ncclConfig_t, size) == 0 && offsetof(ncclConfig_t, magic) == sizeof(size_t) &&
                  offsetof(ncclConfig_t, version) == sizeof(size_t) + sizeof(unsigned int) &&
                  offsetof(ncclConfig_t, blocking) == sizeof(size_t) + 2 * sizeof(unsigned int),
              "ncclConfig_t's head is size, magic, version, blocking");
static_assert(sizeof(ncclComm_t) == sizeof(void*) && sizeof(cudaStream_t) == sizeof(collieStream_t),
              "handles and streams are pointers");

namespace collie_nccl {
namespace {

constexpr unsigned int kNcclConfigMagic = 0xcafebeef;  // NCCL_CONFIG_INITIALIZER's magic

thread_local char tlsLastError[kErrorBytes];
thread_local char tlsReturnedError[kErrorBytes];  // what ncclGetLastError(comm) returns: a stable per-thread copy

// Every ncclComm alive; recordError writes to a communicator only while holding liveMu and finding it here. Never
// destroyed, so that a communicator freed during the process's exit still finds them.
std::mutex& liveMu = *new std::mutex;
std::unordered_set<const ncclComm*>& liveComms = *new std::unordered_set<const ncclComm*>;

}  // namespace

// ---- Error messages -------------------------------------------------------------------------------------------
void recordError(ncclComm* comm, const char* message) {
  std::snprintf(tlsLastError, sizeof(tlsLastError), "%s", message);
  if (comm) {
    std::lock_guard<std::mutex> live(liveMu);
    if (liveComms.count(comm) == 0) return;  // freed (ncclCommAbort on another thread), or never a communicator
    std::lock_guard<std::mutex> lock(comm->mu);
    std::snprintf(comm->lastError, sizeof(comm->lastError), "%s", message);
  }
}

__attribute__((format(printf, 3, 4))) ncclResult_t fail(ncclComm* comm, ncclResult_t code, const char* fmt, ...) {
  char buf[kErrorBytes];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  recordError(comm, buf);
  return code;
}

ncclResult_t fromCollieCode(collieResult_t r) {
  switch (r) {
    case collieSuccess:
      return ncclSuccess;
    case collieUnhandledCudaError:
      return ncclUnhandledCudaError;
    case collieSystemError:
      return ncclSystemError;
    case collieInternalError:
      return ncclInternalError;
    case collieInvalidArgument:
      return ncclInvalidArgument;
    case collieInvalidUsage:
      return ncclInvalidUsage;
    case collieRemoteError:
      return ncclRemoteError;
    case collieInProgress:
      return ncclInProgress;
    case collieTimeout:
      return ncclRemoteError;  // NCCL has no timeout code: a peer that does not answer is a remote failure
    default:
      return ncclInternalError;
  }
}

// The result of a collie call made on this thread; a failure's message (collie's, for this thread) is recorded.
ncclResult_t fromCollie(ncclComm* comm, const char* fn, collieResult_t r) {
  if (r == collieSuccess) return ncclSuccess;
  if (r == collieInProgress) return ncclInProgress;
  fail(comm, fromCollieCode(r), "%s: %s%s", fn, collieWhy(r).c_str(), r == collieTimeout ? " (collie timeout)" : "");
  return fromCollieCode(r);
}

ncclResult_t unsupported(ncclComm* comm, ncclResult_t code, const char* fn, const char* why) {
  return fail(comm, code, "%s is not supported by collie's NCCL layer: %s", fn, why);
}

const char* lastError(ncclComm* comm) {
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->lastError[0]) {
      std::snprintf(tlsReturnedError, sizeof(tlsReturnedError), "%s", comm->lastError);
      return tlsReturnedError;
    }
  }
  return tlsLastError;
}

// ---- Types ----------------------------------------------------------------------------------------------------
ncclResult_t toCollieType(ncclComm* comm, const char* fn, const ncclDataType_t& type, collieDataType_t* out) {
  const int v = rawEnum(type);
  switch (v) {
    case ncclInt8:
      *out = collieInt8;
      return ncclSuccess;
    case ncclUint8:
      *out = collieUint8;
      return ncclSuccess;
    case ncclInt32:
      *out = collieInt32;
      return ncclSuccess;
    case ncclUint32:
      *out = collieUint32;
      return ncclSuccess;
    case ncclInt64:
      *out = collieInt64;
      return ncclSuccess;
    case ncclUint64:
      *out = collieUint64;
      return ncclSuccess;
    case ncclFloat16:
      *out = collieFloat16;
      return ncclSuccess;
    case ncclFloat32:
      *out = collieFloat32;
      return ncclSuccess;
    case ncclFloat64:
      *out = collieFloat64;
      return ncclSuccess;
    case ncclBfloat16:
      *out = collieBfloat16;
      return ncclSuccess;
    case ncclFloat8e4m3:
      return fail(comm, ncclInvalidArgument, "%s: datatype ncclFloat8e4m3 (%d): fp8 types are not supported by collie",
                  fn, v);
    case ncclFloat8e5m2:
      return fail(comm, ncclInvalidArgument, "%s: datatype ncclFloat8e5m2 (%d): fp8 types are not supported by collie",
                  fn, v);
    default:
      return fail(comm, ncclInvalidArgument, "%s: datatype=%d is not an NCCL datatype (0..%d)", fn, v,
                  static_cast<int>(ncclNumTypes) - 1);
  }
}

ncclResult_t toCollieOp(ncclComm* comm, const char* fn, const ncclRedOp_t& op, collieRedOp_t* out) {
  const int v = rawEnum(op);
  switch (v) {
    case ncclSum:
      *out = collieSum;
      return ncclSuccess;
    case ncclProd:
      *out = collieProd;
      return ncclSuccess;
    case ncclMax:
      *out = collieMax;
      return ncclSuccess;
    case ncclMin:
      *out = collieMin;
      return ncclSuccess;
    case ncclAvg:
      *out = collieAvg;
      return ncclSuccess;
    default:
      if (v >= static_cast<int>(ncclNumOps)) {  // ncclRedOpCreatePreMulSum's: collie checks it is comm's
        *out = static_cast<collieRedOp_t>(v);
        return ncclSuccess;
      }
      return fail(comm, ncclInvalidArgument, "%s: op=%d is not an NCCL reduction operator", fn, v);
  }
}

size_t collieTypeSize(collieDataType_t t) {
  switch (t) {
    case collieInt8:
    case collieUint8:
      return 1;
    case collieFloat16:
    case collieBfloat16:
      return 2;
    case collieInt32:
    case collieUint32:
    case collieFloat32:
      return 4;
    default:
      return 8;
  }
}

// ---- Configs --------------------------------------------------------------------------------------------------
// True when the caller's config (of `size` bytes, perhaps from an older nccl.h) holds the field at `offset`.
bool hasField(const ncclConfig_t* config, size_t offset, size_t bytes) { return config->size >= offset + bytes; }
#define NCCL_CONFIG_HAS(config, field) hasField(config, offsetof(ncclConfig_t, field), sizeof((config)->field))

// Checks a config as NCCL does (initialiser's magic and version, attribute ranges) and keeps what collie can honour:
// blocking and commName. The rest tunes NCCL's GPU kernels and network plugins, which collie does not have; those
// attributes are range-checked and otherwise ignored.
ncclResult_t parseConfig(const char* fn, const ncclConfig_t* config, Settings* out) {
  if (!config) return ncclSuccess;
  if (config->magic != kNcclConfigMagic || config->version < NCCL_VERSION(2, 14, 0) ||
      config->size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    return fail(nullptr, ncclInvalidArgument,
                "%s: config was not initialised with NCCL_CONFIG_INITIALIZER (magic 0x%x, version %u, size %zu)", fn,
                config->magic, config->version, config->size);
  }
  auto binary = [&](const char* name, int v) -> ncclResult_t {
    if (v != NCCL_CONFIG_UNDEF_INT && v != 0 && v != 1)
      return fail(nullptr, ncclInvalidArgument, "%s: config->%s=%d must be 0 or 1", fn, name, v);
    return ncclSuccess;
  };
  auto positive = [&](const char* name, int v) -> ncclResult_t {
    if (v != NCCL_CONFIG_UNDEF_INT && v <= 0)
      return fail(nullptr, ncclInvalidArgument, "%s: config->%s=%d must be positive", fn, name, v);
    return ncclSuccess;
  };
  NCCL_TRY(binary("blocking", config->blocking));
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) out->blocking = config->blocking == 1;
  if (NCCL_CONFIG_HAS(config, cgaClusterSize) && config->cgaClusterSize != NCCL_CONFIG_UNDEF_INT &&
      config->cgaClusterSize < 0) {
    return fail(nullptr, ncclInvalidArgument, "%s: config->cgaClusterSize=%d must not be negative", fn,
                config->cgaClusterSize);
  }
  if (NCCL_CONFIG_HAS(config, minCTAs)) NCCL_TRY(positive("minCTAs", config->minCTAs));
  if (NCCL_CONFIG_HAS(config, maxCTAs)) NCCL_TRY(positive("maxCTAs", config->maxCTAs));
  if (NCCL_CONFIG_HAS(config, maxCTAs) && config->minCTAs != NCCL_CONFIG_UNDEF_INT &&
      config->maxCTAs != NCCL_CONFIG_UNDEF_INT && config->minCTAs > config->maxCTAs) {
    return fail(nullptr, ncclInvalidArgument, "%s: config->minCTAs=%d is greater than config->maxCTAs=%d", fn,
                config->minCTAs, config->maxCTAs);
  }
  if (NCCL_CONFIG_HAS(config, splitShare)) {
    NCCL_TRY(binary("splitShare", config->splitShare));
    if (config->splitShare != NCCL_CONFIG_UNDEF_INT) out->splitShare = config->splitShare == 1;
  }
  if (NCCL_CONFIG_HAS(config, commName) && config->commName) out->name = config->commName;
  if (NCCL_CONFIG_HAS(config, collnetEnable)) NCCL_TRY(binary("collnetEnable", config->collnetEnable));
  if (NCCL_CONFIG_HAS(config, shrinkShare)) NCCL_TRY(binary("shrinkShare", config->shrinkShare));
  if (NCCL_CONFIG_HAS(config, nvlsCTAs)) NCCL_TRY(positive("nvlsCTAs", config->nvlsCTAs));
  if (NCCL_CONFIG_HAS(config, nChannelsPerNetPeer))
    NCCL_TRY(positive("nChannelsPerNetPeer", config->nChannelsPerNetPeer));
  if (NCCL_CONFIG_HAS(config, nvlinkCentricSched)) NCCL_TRY(binary("nvlinkCentricSched", config->nvlinkCentricSched));
  return ncclSuccess;
}

void applySplitShareEnv(Settings* s) {
  const char* v = std::getenv("NCCL_COMM_SPLIT_SHARE_RESOURCES");
  if (v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0)) s->splitShare = v[0] == '1';
}

collieConfig_t collieConfigFor(const Settings& s, bool blocking) {
  collieConfig_t cc = COLLIE_CONFIG_INITIALIZER;
  cc.blocking = blocking ? 1 : 0;
  cc.commName = s.name.empty() ? nullptr : s.name.c_str();
  cc.splitShare = s.splitShare ? 1 : 0;
  return cc;
}

// ---- Communicators --------------------------------------------------------------------------------------------
// Waits for an init or split deferred to the end of a group (a no-op for any other communicator).
void waitDeferred(ncclComm* comm) {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->deferred.joinable()) t = std::move(comm->deferred);
  }
  if (t.joinable()) t.join();
}

DeferredOutcome finishedDeferred(ncclComm* comm) {
  waitDeferred(comm);
  std::lock_guard<std::mutex> lock(comm->mu);
  return {comm->deferredResult, comm->deferredError, comm->c};
}

// Whether comm's creation still runs: a split on its thread, or a non-blocking init (in a group or not).
bool stillCreating(ncclComm* comm) {
  if (!comm->deferredDone.load()) return true;  // a split on its thread
  collieComm_t c = nullptr;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    c = comm->c;
  }
  collieResult_t e = collieSuccess;
  return c && collieCommGetAsyncError(c, &e) == collieSuccess && e == collieInProgress;  // a non-blocking init
}

// The collie communicator behind comm (see nccl_abi.hpp).
ncclResult_t resolve(ncclComm* comm, const char* fn, collieComm_t* out) {
  if (!comm) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  if (comm->pending) {
    return fail(comm, ncclInvalidUsage,
                "%s: comm is created at the end of its group, which has not come (ncclGroupEnd)", fn);
  }
  if (!comm->blocking && stillCreating(comm)) {
    return fail(comm, ncclInvalidArgument,
                "%s: comm is still being created (non-blocking); use it once ncclCommGetAsyncError gives ncclSuccess",
                fn);
  }
  const DeferredOutcome done = finishedDeferred(comm);
  *out = done.c;
  if (done.result != ncclSuccess) return fail(comm, done.result, "%s: %s", fn, done.error.c_str());
  if (!*out) return fail(comm, ncclInvalidUsage, "%s: comm was not created", fn);
  return ncclSuccess;
}

// resolve(), and the communicator must not have been finalized: for calls that communicate.
ncclResult_t resolveLive(ncclComm* comm, const char* fn, collieComm_t* out, bool afterSplits) {
  NCCL_TRY(resolve(comm, fn, out));
  if (afterSplits) waitSplits(comm);  // a call on a family comes after its splits already started, on every rank
  if (comm->finalized.load()) {
    return fail(comm, ncclInvalidUsage, "%s: comm was finalized (ncclCommFinalize); only ncclCommDestroy may follow",
                fn);
  }
  return ncclSuccess;
}

// Frees the wrapper (after its collie communicator is gone) and any registration handles left on it.
void freeComm(ncclComm* comm) {
  for (Registration* r : comm->registrations) delete r;
  delete comm;
}

std::string collieWhy(collieResult_t r) {
  const char* m = collieGetLastError(nullptr);
  return (m && *m) ? m : collieGetErrorString(r);
}

}  // namespace collie_nccl

ncclComm::ncclComm() {
  std::lock_guard<std::mutex> live(collie_nccl::liveMu);
  collie_nccl::liveComms.insert(this);
}

ncclComm::~ncclComm() {
  std::lock_guard<std::mutex> live(collie_nccl::liveMu);
  collie_nccl::liveComms.erase(this);
}
