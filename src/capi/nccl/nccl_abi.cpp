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
// (a C caller may pass any int). fp8 types (ncclFloat8e4m3, ncclFloat8e5m2) and custom reduction operators
// (ncclRedOpCreatePreMulSum) are rejected with ncclInvalidArgument and a message. collieTimeout, collie's own code
// after NCCL's last, becomes ncclRemoteError (a peer that stopped answering), its message kept.
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
// declares them); nccl_comm.cpp the communicator entry points, errors and registration; nccl_coll.cpp the
// collectives, point-to-point, groups and ncclMemAlloc; cuda_driver.cpp the little of CUDA the layer needs.
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
thread_local int tlsGroupDepth = 0;
thread_local std::vector<ncclComm*> tlsGroupDeferred;  // inits and splits to start at the outermost end
thread_local bool tlsGroupFailed = false;              // a call inside the open group failed (failGroupOn)
thread_local std::vector<std::shared_ptr<collie_nccl::SplitOrder>> tlsGroupCallFamilies;  // noteGroupCall

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
      if (v >= static_cast<int>(ncclNumOps)) {
        return fail(comm, ncclInvalidArgument,
                    "%s: op=%d is a custom reduction operator (ncclRedOpCreatePreMulSum), which collie does not "
                    "support",
                    fn, v);
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
  waitDeferred(comm);
  ncclResult_t deferred;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    deferred = comm->deferredResult;
    why = comm->deferredError;
    *out = comm->c;
  }
  if (deferred != ncclSuccess) return fail(comm, deferred, "%s: %s", fn, why.c_str());
  if (!*out) return fail(comm, ncclInvalidUsage, "%s: comm was not created", fn);
  return ncclSuccess;
}

// resolve(), and the communicator must not have been finalized: for calls that communicate.
ncclResult_t resolveLive(ncclComm* comm, const char* fn, collieComm_t* out) {
  NCCL_TRY(resolve(comm, fn, out));
  waitSplits(comm);  // a call on a family comes after its splits already started, on every rank
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

// ---- Groups ---------------------------------------------------------------------------------------------------
int& groupDepth() { return tlsGroupDepth; }

ncclResult_t failGroupOn(ncclComm* comm, ncclResult_t r) {
  if (r != ncclSuccess && r != ncclInProgress && tlsGroupDepth > 0) {
    tlsGroupFailed = true;
    collieGroupFail(static_cast<collieResult_t>(r), lastError(comm));
  }
  return r;
}

bool takeGroupFailure() { return std::exchange(tlsGroupFailed, false); }

void deferToGroupEnd(ncclComm* comm, const char* fn, bool isInit, std::function<collieResult_t(collieComm_t*)> create,
                     std::shared_ptr<collie_nccl::SplitOrder> order) {
  tlsGroupDeferred.push_back(comm);
  comm->pending = std::move(create);
  comm->pendingIsInit = isInit;
  comm->pendingOrder = order ? std::move(order) : std::make_shared<collie_nccl::SplitOrder>();
  comm->pendingFn = fn;
}

std::string collieWhy(collieResult_t r) {
  const char* m = collieGetLastError(nullptr);
  return (m && *m) ? m : collieGetErrorString(r);
}

namespace {

// Keeps a creation's failure as comm's result and last message.
void recordCreationFailure(ncclComm* comm, ncclResult_t r, const std::string& why) {
  std::lock_guard<std::mutex> lock(comm->mu);
  comm->deferredResult = r;
  comm->deferredError = why;
  std::snprintf(comm->lastError, sizeof(comm->lastError), "%s: %s", comm->pendingFn, why.c_str());
}

// A split: on a thread of its own, which waits until `before` (the split of the same parent issued before it in the
// group, if any) has run, stores the result, sets deferredDone and then `done`.
void launchSplit(ncclComm* comm, std::function<collieResult_t(collieComm_t*)> create, std::shared_future<void> before,
                 std::promise<void> done) {
  comm->deferredDone = false;
  try {
    std::thread t([comm, create = std::move(create), before = std::move(before), done = std::move(done)]() mutable {
      if (before.valid()) before.wait();  // ready also when that split's thread could not start (a broken promise)
      collieComm_t c = nullptr;
      collieResult_t r = create(&c);
      {
        std::lock_guard<std::mutex> lock(comm->mu);
        comm->c = c;
      }
      if (r != collieSuccess) recordCreationFailure(comm, fromCollieCode(r), collieWhy(r));
      comm->deferredDone = true;
      done.set_value();
    });
    std::lock_guard<std::mutex> lock(comm->mu);  // waitDeferred may look from another thread (ncclCommAbort)
    comm->deferred = std::move(t);
  } catch (const std::system_error& e) {
    recordCreationFailure(comm, ncclSystemError, std::string("cannot start a thread: ") + e.what());
    comm->deferredDone = true;
  }
}

// An init: collie's non-blocking init, which ncclCommAbort stops; a failure at once is kept as its result.
void launchInit(ncclComm* comm, const std::function<collieResult_t(collieComm_t*)>& init) {
  collieComm_t c = nullptr;
  collieResult_t r = init(&c);
  if (r != collieSuccess && r != collieInProgress) return recordCreationFailure(comm, fromCollieCode(r), collieWhy(r));
  {
    std::lock_guard<std::mutex> lock(comm->mu);  // stillCreating may look from another thread
    comm->c = c;
  }
  comm->initInGroup = true;
}

// Waits for comm's init in a group; a failed one is destroyed and its failure kept as a deferred creation's.
void waitInitInGroup(ncclComm* comm) {
  int n = 0;
  collieResult_t r = collieCommCount(comm->c, &n);  // waits for the init, and fails as it did
  if (r != collieSuccess) {
    const std::string why = collieWhy(r);
    collieCommDestroy(comm->c);
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      comm->c = nullptr;
    }
    recordCreationFailure(comm, fromCollieCode(r), why);
  }
  comm->initInGroup = false;
}

}  // namespace

// Splits of one family run one after another, in the order issued (the same on every rank; SplitOrder says why),
// across groups too: a non-blocking split still running when the next group ends comes first. Splits of other
// families (other ranks' communicators driven by this thread among them), and inits, run at once.
void launchDeferred() {
  for (ncclComm* comm : tlsGroupDeferred) {
    std::function<collieResult_t(collieComm_t*)> create = std::move(comm->pending);
    comm->pending = nullptr;
    if (comm->pendingIsInit) {
      launchInit(comm, create);
    } else {
      std::promise<void> done;
      std::shared_future<void> before = comm->pendingOrder->enqueue(done.get_future().share());
      launchSplit(comm, std::move(create), std::move(before), std::move(done));
    }
  }
}

void waitSplits(ncclComm* comm) { comm->splitOrder->wait(); }

void noteGroupCall(ncclComm* comm) {
  if (tlsGroupDepth == 0 || !comm) return;
  for (const auto& o : tlsGroupCallFamilies)
    if (o == comm->splitOrder) return;
  tlsGroupCallFamilies.push_back(comm->splitOrder);
}

void waitSplitsOfGroupCalls() {
  std::vector<std::shared_ptr<collie_nccl::SplitOrder>> families;
  families.swap(tlsGroupCallFamilies);
  for (const auto& order : families) order->wait();
}

collieResult_t splitInOrder(collie_nccl::SplitOrder& order, const std::function<collieResult_t()>& split) {
  std::promise<void> done;  // set when this split ends (or broken, should split() throw)
  std::shared_future<void> before = order.enqueue(done.get_future().share());
  if (before.valid()) before.wait();
  const collieResult_t r = split();
  done.set_value();
  return r;
}

void abandonDeferred(ncclResult_t result, const std::string& why) {
  tlsGroupCallFamilies.clear();  // none of the group's calls is issued
  std::vector<ncclComm*> deferred;
  deferred.swap(tlsGroupDeferred);
  for (ncclComm* comm : deferred) {
    comm->pending = nullptr;
    if (comm->discardAtGroupEnd) {
      freeComm(comm);  // NCCL_SPLIT_NOCOLOR: the caller holds no handle
      continue;
    }
    recordCreationFailure(comm, result, "not created, since its group failed: " + why);
  }
}

ncclResult_t finishDeferred(const char* fn, bool* inProgress) {
  *inProgress = false;
  std::vector<ncclComm*> deferred;
  deferred.swap(tlsGroupDeferred);
  ncclResult_t result = ncclSuccess;
  for (ncclComm* comm : deferred) {
    if (!comm->blocking && !comm->discardAtGroupEnd) {
      *inProgress = *inProgress || stillCreating(comm);
      continue;  // non-blocking: polled with ncclCommGetAsyncError
    }
    if (comm->initInGroup) waitInitInGroup(comm);
    waitDeferred(comm);
    ncclResult_t r;
    std::string why;
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      r = comm->deferredResult;
      why = comm->deferredError;
    }
    if (comm->discardAtGroupEnd) {
      // NCCL_SPLIT_NOCOLOR: the split gave this rank no communicator; the caller holds no handle.
      if (comm->c) collieCommDestroy(comm->c);
      freeComm(comm);
    }
    if (r != ncclSuccess && result == ncclSuccess) result = fail(nullptr, r, "%s: %s", fn, why.c_str());
  }
  return result;
}

void forgetDeferred(ncclComm* comm) {
  tlsGroupDeferred.erase(std::remove(tlsGroupDeferred.begin(), tlsGroupDeferred.end(), comm), tlsGroupDeferred.end());
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
