// libnccl.so.2's insides, shared by its translation units: the communicator handle, errors, conversions of NCCL's
// types and configs to collie's, and the export macro. See nccl_abi.cpp for the design of the whole layer.
//
// NCCL's API (the CUDA toolkit's nccl.h) is implemented in nccl_comm.cpp (communicators, errors, registration) and
// nccl_coll.cpp (collectives, point-to-point, groups, memory), on collie's public C API (<collie/collie.h>) only.
// Everything here has hidden visibility; only the nccl*/pnccl* entry points are exported (NCCL_ABI, nccl.map).
#pragma once

#include <collie/collie.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <system_error>
#include <thread>

namespace collie_nccl {

constexpr size_t kErrorBytes = 1024;  // the longest message kept for ncclGetLastError

/// What ncclCommRegister hands out: collie needs no registration, so a handle only records the buffer.
struct Registration {
  void* buff;
  size_t size;
};

/// The splits of a family of communicators in the order issued (ncclComm::splitOrder). Every split runs an
/// all-gather on its parent, and those of one family take turns on the same connections: run at once, they would
/// meet in each rank's thread order, which may differ between ranks (two splits of one parent would then take each
/// other's entries: communicators of the wrong members, with no error).
struct SplitOrder {
  std::mutex mu;
  std::shared_future<void> last;  ///< ready once the family's last split started has ended (invalid: none)

  /// `mine` becomes the last split; returns the one before it.
  std::shared_future<void> enqueue(std::shared_future<void> mine) {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(last, std::move(mine));
  }
  /// Waits until the splits started so far have ended.
  void wait() {
    std::shared_future<void> f;
    {
      std::lock_guard<std::mutex> lock(mu);
      f = last;
    }
    if (f.valid()) f.wait();
  }
};

}  // namespace collie_nccl

/// What an ncclComm_t points at (nccl.h declares struct ncclComm and leaves it opaque). Every live one is in a
/// process-wide set, so that a message can be recorded safely for a communicator that ncclCommAbort on another
/// thread may have freed meanwhile (a call blocked in collie returns an error when its communicator is aborted).
struct ncclComm {
  ncclComm();
  ~ncclComm();
  ncclComm(const ncclComm&) = delete;
  ncclComm& operator=(const ncclComm&) = delete;

  std::mutex mu;
  collieComm_t c = nullptr;  ///< null until created (a deferred init or split), and for a failed one
  int device = -1;           ///< the CUDA device it was created for; -1: none (CUDA not in use at creation)
  bool blocking = true;      ///< the config's blocking attribute (inherited by ncclCommSplit without a config)
  bool splitShare = false;   ///< the config's splitShare: whether ncclCommSplit's children of this one share its
                             ///< connections (NCCL decides by the parent's config, not the split's)
  /// Its family's splits (a communicator and the children that share its connections, link_share.hpp), in the
  /// order issued: a split of any member waits for the family's split issued before it, and a call that
  /// communicates, ncclCommDestroy and ncclCommAbort wait for the family's splits already started (waitSplits).
  std::shared_ptr<collie_nccl::SplitOrder> splitOrder = std::make_shared<collie_nccl::SplitOrder>();
  std::atomic<bool> finalized{false};
  std::set<collie_nccl::Registration*> registrations;
  char lastError[collie_nccl::kErrorBytes] = {};

  // An init or split made inside a group: recorded in `pending` and started only at the outermost ncclGroupEnd
  // (none of them when the group failed: launchDeferred, abandonDeferred). A split then runs on `deferred`, which
  // stores the result below and then sets deferredDone; an init fails into the result below too (waitInitInGroup).
  std::function<collieResult_t(collieComm_t*)> pending;
  bool pendingIsInit = false;
  std::shared_ptr<collie_nccl::SplitOrder> pendingOrder;  ///< a split's: its parent's splitOrder
  const char* pendingFn = "";
  std::thread deferred;
  std::atomic<bool> deferredDone{true};
  ncclResult_t deferredResult = ncclSuccess;
  std::string deferredError;
  bool discardAtGroupEnd = false;  ///< a split with NCCL_SPLIT_NOCOLOR: the caller never sees this handle
  /// An init in a group: `c` is collie's non-blocking init of it (ncclCommAbort stops it), which the outermost
  /// ncclGroupEnd waits for when the config blocks (finishDeferred). Only the group's thread reads it.
  bool initInGroup = false;
};

namespace collie_nccl {

// ---- Errors ---------------------------------------------------------------------------------------------------
/// Keeps message as this thread's last error and, when comm is not NULL and still alive, as comm's.
void recordError(ncclComm* comm, const char* message);
/// Records a printf-formatted message (recordError) and returns code.
__attribute__((format(printf, 3, 4))) ncclResult_t fail(ncclComm* comm, ncclResult_t code, const char* fmt, ...);
/// A collie result code as NCCL's (collieTimeout, which NCCL lacks, as ncclRemoteError).
ncclResult_t fromCollieCode(collieResult_t r);
/// The result of a collie call just made on this thread; a failure's message (collie's) is recorded, prefixed fn.
ncclResult_t fromCollie(ncclComm* comm, const char* fn, collieResult_t r);
/// The error of an entry point that is not supported: "<fn> is not supported by collie's NCCL layer: <why>".
ncclResult_t unsupported(ncclComm* comm, ncclResult_t code, const char* fn, const char* why);
/// collie's message for the failure r of a collie call just made on this thread.
std::string collieWhy(collieResult_t r);
/// ncclGetLastError: comm's last message if comm has one, else this thread's (a stable per-thread copy).
const char* lastError(ncclComm* comm);
/// Returns r. When r is a failure of a call made inside an NCCL group, it fails collie's group first
/// (collieGroupFail, with the message recorded for comm): the outermost ncclGroupEnd then issues none of the group and
/// returns the error, as NCCL's group does with any error of a call inside it.
ncclResult_t failGroupOn(ncclComm* comm, ncclResult_t r);

/// Runs an entry point's body; nothing thrown (bad_alloc, a thread that cannot start) escapes.
template <typename F>
ncclResult_t guarded(ncclComm* comm, const char* fn, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(comm, ncclSystemError, "%s: out of memory", fn);
  } catch (const std::system_error& e) {
    return fail(comm, ncclSystemError, "%s: %s", fn, e.what());
  } catch (const std::exception& e) {
    return fail(comm, ncclInternalError, "%s: %s", fn, e.what());
  } catch (...) {
    return fail(comm, ncclInternalError, "%s: unknown exception", fn);
  }
}

#define NCCL_TRY(expr)                                  \
  do {                                                  \
    ncclResult_t nccl_try_r_ = (expr);                  \
    if (nccl_try_r_ != ncclSuccess) return nccl_try_r_; \
  } while (0)

// ---- Types ----------------------------------------------------------------------------------------------------
/// An enum argument read as the int the caller passed (loading an out-of-range value as the enum type would be
/// undefined behaviour in C++; a C caller may pass any int).
template <typename E>
int rawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

/// An enum value of `To` with the bits of `from` (an int-sized enum or int): no conversion of a value outside the
/// enum's range, which C++ leaves undefined; the receiving side validates it.
template <typename To, typename From>
To sameBits(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

/// NCCL's datatype as collie's; ncclInvalidArgument (with a message) for fp8 and for values outside the enum.
ncclResult_t toCollieType(ncclComm* comm, const char* fn, const ncclDataType_t& type, collieDataType_t* out);
/// NCCL's built-in reduction as collie's; ncclInvalidArgument for custom (ncclRedOpCreatePreMulSum) and bad ops.
ncclResult_t toCollieOp(ncclComm* comm, const char* fn, const ncclRedOp_t& op, collieRedOp_t* out);
/// Bytes per element of a collie datatype.
size_t collieTypeSize(collieDataType_t t);

// ---- Configs --------------------------------------------------------------------------------------------------
/// What collie can honour of an ncclConfig_t.
struct Settings {
  bool blocking = true;
  std::string name;         ///< empty: collie names the communicator
  bool splitShare = false;  ///< the new communicator's splitShare (its own children share its connections)
};
/// Checks config as NCCL does and fills *out (left as it is for a NULL config).
ncclResult_t parseConfig(const char* fn, const ncclConfig_t* config, Settings* out);
/// NCCL_COMM_SPLIT_SHARE_RESOURCES (0 or 1), where set, overrides a parsed config's splitShare, as in NCCL.
void applySplitShareEnv(Settings* s);
/// collie's config for s; commName points into s.
collieConfig_t collieConfigFor(const Settings& s, bool blocking);

// ---- Communicators --------------------------------------------------------------------------------------------
/// Waits for an init or split deferred to the end of a group (a no-op for any other communicator).
void waitDeferred(ncclComm* comm);
/// What a creation left once waitDeferred returned: its result, why it failed, and the collie communicator.
struct DeferredOutcome {
  ncclResult_t result;
  std::string error;
  collieComm_t c;
};
/// waitDeferred, then comm's DeferredOutcome.
DeferredOutcome finishedDeferred(ncclComm* comm);
/// Whether comm's creation still runs: a split on its thread, or a non-blocking init (in a group or not).
bool stillCreating(ncclComm* comm);
/// The collie communicator behind comm, waiting for a deferred creation of a blocking communicator; fails for NULL,
/// for a failed creation, for one whose group has not ended, and, as NCCL's ncclCommEnsureReady, with
/// ncclInvalidArgument for a non-blocking communicator still being created (ncclCommGetAsyncError says
/// ncclInProgress).
ncclResult_t resolve(ncclComm* comm, const char* fn, collieComm_t* out);
/// resolve(), and comm must not have been finalized: for calls that communicate. With `afterSplits`, it first waits
/// for the splits of comm's family already started (waitSplits), which every call on the family must follow; shrink,
/// which uses none of the family's connections, need not.
ncclResult_t resolveLive(ncclComm* comm, const char* fn, collieComm_t* out, bool afterSplits = true);
/// Frees the handle (after its collie communicator is gone) and any registration handles left on it.
void freeComm(ncclComm* comm);

// ---- Groups ---------------------------------------------------------------------------------------------------
/// This thread's ncclGroupStart nesting depth.
int& groupDepth();
/// Whether a call inside this thread's group failed (failGroupOn), clearing it: at the outermost ncclGroupEnd, which
/// then starts none of the group's inits and splits and issues none of its calls.
bool takeGroupFailure();
/// Inside a group: records `create`, which makes the collie communicator of comm, for the outermost ncclGroupEnd
/// (launchDeferred) to start and wait for (finishDeferred): an init (isInit: `create` is collie's non-blocking init,
/// run on the group's thread, waited for when comm's config blocks) or a split in the family whose `order` this is
/// (run on a thread of its own, once the family's split issued before it has ended).
void deferToGroupEnd(ncclComm* comm, const char* fn, bool isInit, std::function<collieResult_t(collieComm_t*)> create,
                     std::shared_ptr<collie_nccl::SplitOrder> order = nullptr);
/// Waits for the splits of comm's family (ncclComm::splitOrder) that have started, deferred or not.
void waitSplits(ncclComm* comm);
/// Inside a group: a data call on comm, whose family's splits started at the group's end (a non-blocking one runs on
/// past it) the group's calls must wait for (waitSplitsOfGroupCalls, before collie's group end issues them).
void noteGroupCall(ncclComm* comm);
/// At the outermost ncclGroupEnd: waits for the splits of the families noteGroupCall saw, and forgets them.
void waitSplitsOfGroupCalls();
/// Runs `split` (a split of a member of the family whose order this is) once the family's split issued before it
/// has ended.
collieResult_t splitInOrder(collie_nccl::SplitOrder& order, const std::function<collieResult_t()>& split);
/// At the outermost ncclGroupEnd of a group none of whose calls failed: starts its inits and splits, all of them
/// before any is waited for (one thread may create several ranks of one communicator).
void launchDeferred();
/// At the outermost ncclGroupEnd of a failed group: starts none of its inits and splits; each handle keeps
/// `result` and `why` as its creation's failure (ncclCommGetAsyncError, any call), NCCL_SPLIT_NOCOLOR ones are freed.
void abandonDeferred(ncclResult_t result, const std::string& why);
/// At the outermost ncclGroupEnd, after launchDeferred: waits for the deferred creations of this thread's group
/// (those with a blocking config), frees the handles of NCCL_SPLIT_NOCOLOR splits, and returns the first failure.
/// *inProgress tells whether a non-blocking one is still running.
ncclResult_t finishDeferred(const char* fn, bool* inProgress);
/// Takes comm off this thread's group's deferred creations (ncclCommDestroy/Abort before the group's end).
void forgetDeferred(ncclComm* comm);

}  // namespace collie_nccl

// ---- Exports: ncclX, weak as in NCCL, and its profiling alias pncclX
// -------------------------------------------------
#define NCCL_ABI(ret, func, ...)                                                            \
  extern "C" __attribute__((visibility("default"), alias(#func))) ret p##func(__VA_ARGS__); \
  extern "C" __attribute__((visibility("default"), weak)) ret func(__VA_ARGS__)
