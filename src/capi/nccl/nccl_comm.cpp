// libnccl.so.2, communicators: NCCL's unique ids, inits (by rank, config, scalable, all in one process), split,
// finalize, destroy and abort, queries (count, rank, CUDA device, async error), error strings, registration, and
// shrink, and the communicator functions collie does not support (revoke, windows, custom reduction operators), each
// returning an error with its reason. Built on collie's C API through the helpers of nccl_abi.hpp.
//
// Inits and splits inside a group are deferred to the outermost ncclGroupEnd, as NCCL defers them, so that one thread
// can create several ranks of one communicator: each is recorded and started there, none of them if a call of the
// group failed; an init starts as collie's non-blocking init, which ncclCommAbort stops, a split runs on a thread of
// its own (deferToGroupEnd); ncclCommDestroy or ncclCommAbort of one before that end takes it off the group's list (and
// after it, waits for a split). A non-blocking config outside a group uses collie's own non-blocking init
// (ncclInProgress, then ncclCommGetAsyncError). ncclCommSplit always completes before it returns (collie's split
// blocks), which a non-blocking config allows.
#include <memory>
#include <vector>

#include "cuda_driver.hpp"
#include "nccl_abi.hpp"

using namespace collie_nccl;

namespace {

ncclResult_t initRankUnguarded(const char* fn, ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                               const ncclConfig_t* config) {
  if (!out) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(nullptr, ncclInvalidArgument, "%s: rank=%d is not in [0, nranks=%d)", fn, rank, nranks);
  }
  Settings s;
  NCCL_TRY(parseConfig(fn, config, &s));
  applySplitShareEnv(&s);
  collieUniqueId cid;
  std::memcpy(&cid, &id, sizeof(cid));
  auto comm = std::make_unique<ncclComm>();
  comm->device = collie_nccl::currentCudaDevice();
  comm->blocking = s.blocking;
  comm->splitShare = s.splitShare;
  if (groupDepth() > 0) {
    deferToGroupEnd(comm.get(), fn, /*isInit=*/true, [s, cid, nranks, rank](collieComm_t* c) {
      collieConfig_t cc = collieConfigFor(s, false);  // the group's end waits for it if s.blocking
      return collieCommInitRankConfig(c, nranks, cid, rank, &cc);
    });
    *out = comm.release();
    return ncclSuccess;
  }
  collieConfig_t cc = collieConfigFor(s, s.blocking);
  collieComm_t c = nullptr;
  collieResult_t r = collieCommInitRankConfig(&c, nranks, cid, rank, &cc);
  if (r != collieSuccess && r != collieInProgress) return fromCollie(nullptr, fn, r);
  comm->c = c;
  *out = comm.release();
  return r == collieInProgress ? ncclInProgress : ncclSuccess;
}

// An init entry point's body, guarded; a failure inside a group fails the group (failGroupOn), as in NCCL.
ncclResult_t initRank(const char* fn, ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                      const ncclConfig_t* config) {
  return failGroupOn(nullptr,
                     guarded(nullptr, fn, [&] { return initRankUnguarded(fn, out, nranks, id, rank, config); }));
}

}  // namespace

NCCL_ABI(ncclResult_t, ncclGetVersion, int* version) {
  if (!version) return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;  // the nccl.h this library implements
  return ncclSuccess;
}

NCCL_ABI(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  const char* fn = "ncclGetUniqueId";
  if (!uniqueId) return fail(nullptr, ncclInvalidArgument, "%s: uniqueId is NULL", fn);
  collieUniqueId cid;
  collieResult_t r = collieGetUniqueId(&cid);
  if (r != collieSuccess) return fromCollie(nullptr, fn, r);
  std::memcpy(uniqueId, &cid, sizeof(cid));
  return ncclSuccess;
}

NCCL_ABI(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}

NCCL_ABI(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config) {
  return initRank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

// Every rank holds the same nId ids; NCCL spreads the bootstrap over their roots. collie bootstraps through one
// root, so ids[0] (whose root lives in the process that created it, as NCCL requires of every id) is used alone.
NCCL_ABI(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config) {
  const char* fn = "ncclCommInitRankScalable";
  if (nId < 1 || !commIds) {
    return failGroupOn(
        nullptr, fail(nullptr, ncclInvalidArgument, "%s: nId=%d must be at least 1 and commIds non-NULL", fn, nId));
  }
  return initRank(fn, newcomm, nranks, commIds[0], myrank, config);
}

namespace {

ncclResult_t initAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const char* fn = "ncclCommInitAll";
  if (!comms) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  if (ndev < 0) return fail(nullptr, ncclInvalidArgument, "%s: ndev=%d must not be negative", fn, ndev);
  if (ndev == 0) return ncclSuccess;  // as NCCL: nothing to create
  for (int i = 0; devlist && i < ndev; ++i) {
    if (devlist[i] < 0) return fail(nullptr, ncclInvalidArgument, "%s: devlist[%d]=%d is negative", fn, i, devlist[i]);
  }
  return guarded(nullptr, fn, [&]() -> ncclResult_t {
    std::vector<std::unique_ptr<ncclComm>> wrappers;
    for (int i = 0; i < ndev; ++i) wrappers.push_back(std::make_unique<ncclComm>());
    std::vector<collieComm_t> cs(static_cast<size_t>(ndev), nullptr);
    collieResult_t r = collieCommInitAll(cs.data(), ndev, devlist);
    if (r != collieSuccess) return fromCollie(nullptr, fn, r);
    // devlist NULL means devices 0..ndev-1 in NCCL; without CUDA in use there is no device to report.
    const bool cuda = collie_nccl::cudaDriverLoaded();
    for (int i = 0; i < ndev; ++i) {
      ncclComm* h = wrappers[static_cast<size_t>(i)].release();
      h->c = cs[static_cast<size_t>(i)];
      h->device = devlist ? devlist[i] : (cuda ? i : -1);
      comms[i] = h;
    }
    return ncclSuccess;
  });
}

}  // namespace

// A failure inside a group fails the group (failGroupOn), as in NCCL.
NCCL_ABI(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  return failGroupOn(nullptr, initAll(comms, ndev, devlist));
}

// collie has no separate finalize: host calls are complete when they return, and ncclCommDestroy waits for any
// call still queued on a stream. Finalize marks the communicator so that only ncclCommDestroy may follow.
// As NCCL: NULL is no error, and a second finalize is an invalid argument.
NCCL_ABI(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  const char* fn = "ncclCommFinalize";
  if (!comm) return ncclSuccess;
  collieComm_t c = nullptr;
  NCCL_TRY(resolve(comm, fn, &c));
  if (comm->finalized.exchange(true)) return fail(comm, ncclInvalidArgument, "%s: comm was already finalized", fn);
  return ncclSuccess;
}

NCCL_ABI(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  forgetDeferred(comm);  // created in a group still open: its end must not wait for it
  waitDeferred(comm);
  waitSplits(comm);  // a split of it still running (non-blocking) uses it
  collieResult_t r = comm->c ? collieCommDestroy(comm->c) : collieSuccess;
  freeComm(comm);
  return r == collieSuccess ? ncclSuccess : fromCollie(nullptr, "ncclCommDestroy", r);
}

NCCL_ABI(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  forgetDeferred(comm);  // created in a group still open: its end must not wait for it
  waitDeferred(comm);
  // A split of it still running uses it: its work is stopped first, so that the split ends at once, and the
  // communicator is freed only once the split has.
  if (comm->c) collieCommRevoke(comm->c);
  waitSplits(comm);
  collieResult_t r = comm->c ? collieCommDestroy(comm->c) : collieSuccess;
  freeComm(comm);
  return r == collieSuccess ? ncclSuccess : fromCollie(nullptr, "ncclCommAbort", r);
}

NCCL_ABI(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  (void)revokeFlags;
  return unsupported(comm, ncclInvalidUsage, "ncclCommRevoke",
                     "collie's revoke (collieCommRevoke) leaves a failed communicator, not one that becomes "
                     "ncclSuccess again and can be split; use ncclCommAbort, or ncclCommShrink");
}

namespace {
/// The handle of a communicator made from `comm` (split, shrink): its settings are the parent's where `config`
/// (may be null) does not set them.
ncclResult_t newChild(ncclComm_t comm, const char* fn, ncclConfig_t* config, Settings* s,
                      std::unique_ptr<ncclComm>* child) {
  // NCCL copies the parent's config into a child split without one, and parses a given one from its defaults.
  s->blocking = config ? true : comm->blocking;
  s->splitShare = config ? false : comm->splitShare;
  NCCL_TRY(parseConfig(fn, config, s));
  if (config) applySplitShareEnv(s);
  *child = std::make_unique<ncclComm>();
  (*child)->device = comm->device;
  (*child)->blocking = s->blocking;
  (*child)->splitShare = s->splitShare;
  return ncclSuccess;
}

ncclResult_t splitUnguarded(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  if (!newcomm) return fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return fail(comm, ncclInvalidArgument, "%s: color=%d must be non-negative or NCCL_SPLIT_NOCOLOR", fn, color);
  }
  return guarded(comm, fn, [&]() -> ncclResult_t {
    collieComm_t parent = nullptr;
    NCCL_TRY(resolveLive(comm, fn, &parent));
    Settings s;
    std::unique_ptr<ncclComm> child;
    NCCL_TRY(newChild(comm, fn, config, &s, &child));
    // Whether the child shares the parent's connections is the parent's splitShare, as in NCCL.
    const bool share = comm->splitShare;
    if (share) child->splitOrder = comm->splitOrder;  // one family: its splits take turns on the same connections
    if (groupDepth() > 0) {
      child->discardAtGroupEnd = color == NCCL_SPLIT_NOCOLOR;
      deferToGroupEnd(
          child.get(), fn, /*isInit=*/false,
          [parent, color, key, s, share](collieComm_t* c) {
            collieConfig_t cc = collieConfigFor(s, true);
            cc.splitShare = share ? 1 : 0;
            return collieCommSplit(parent, color, key, c, &cc);
          },
          comm->splitOrder);
      ncclComm* h = child.release();  // owned by the group's end when discarded
      if (!h->discardAtGroupEnd) *newcomm = h;
      return ncclSuccess;
    }
    collieConfig_t cc = collieConfigFor(s, true);  // collie's split always blocks
    cc.splitShare = share ? 1 : 0;
    collieComm_t c = nullptr;
    NCCL_TRY(fromCollie(comm, fn,
                        splitInOrder(*comm->splitOrder, [&] { return collieCommSplit(parent, color, key, &c, &cc); })));
    if (!c) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR
    child->c = c;
    *newcomm = child.release();
    return ncclSuccess;
  });
}

}  // namespace

// A failure inside a group fails the group (failGroupOn), as in NCCL.
NCCL_ABI(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  return failGroupOn(comm, splitUnguarded(comm, color, key, newcomm, config));
}

// collieCommShrink: the survivors connect afresh, without the parent's connections, so it works on a parent whose
// peer died. NCCL_SHRINK_ABORT is accepted like NCCL_SHRINK_DEFAULT: the parent's operations need not end first,
// since the new communicator does not share anything with them. The config's blocking is honoured as split's is
// (the call itself always completes before it returns), its commName names the new communicator, and its
// splitShare is the new communicator's for its own children; the new communicator keeps the parent's timeout.
namespace {

ncclResult_t shrinkUnguarded(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags) {
  const char* fn = "ncclCommShrink";
  if (!newcomm) return fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = nullptr;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    return fail(comm, ncclInvalidArgument, "%s: shrinkFlags=%d: expected NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT", fn,
                shrinkFlags);
  }
  if (groupDepth() > 0) return fail(comm, ncclInvalidUsage, "%s: not supported inside a group", fn);
  return guarded(comm, fn, [&]() -> ncclResult_t {
    collieComm_t parent = nullptr;
    NCCL_TRY(resolveLive(comm, fn, &parent, /*afterSplits=*/false));  // a split of it may hang on the dead rank
    Settings s;
    std::unique_ptr<ncclComm> child;
    NCCL_TRY(newChild(comm, fn, config, &s, &child));
    collieConfig_t cc = collieConfigFor(s, true);  // the name; collie's shrink always blocks
    cc.splitShare = 0;                             // s.splitShare is for the new communicator's own children
    collieComm_t c = nullptr;
    NCCL_TRY(fromCollie(comm, fn, collieCommShrinkConfig(parent, excludeRanksList, excludeRanksCount, &c, &cc)));
    child->c = c;
    *newcomm = child.release();
    return ncclSuccess;
  });
}

}  // namespace

// A failure inside a group (shrink is not supported there) fails the group (failGroupOn), as in NCCL.
NCCL_ABI(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return failGroupOn(comm, shrinkUnguarded(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
}

NCCL_ABI(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (rawEnum(result)) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (ncclGetLastError has the details)";
    case ncclSystemError:
      return "unhandled system error (ncclGetLastError has the details)";
    case ncclInternalError:
      return "internal error (ncclGetLastError has the details)";
    case ncclInvalidArgument:
      return "invalid argument (ncclGetLastError has the details)";
    case ncclInvalidUsage:
      return "invalid usage (ncclGetLastError has the details)";
    case ncclRemoteError:
      return "remote process exited, timed out or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

NCCL_ABI(const char*, ncclGetLastError, ncclComm_t comm) { return lastError(comm); }

// Deprecated in NCCL: reloads NCCL_DEBUG and friends. collie reads its logging settings once; nothing to reload.
NCCL_ABI(void, ncclResetDebugInit) {}

NCCL_ABI(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  const char* fn = "ncclCommGetAsyncError";
  if (!comm || !asyncError) return fail(comm, ncclInvalidArgument, "%s: comm or asyncError is NULL", fn);
  if (!comm->deferredDone.load() || comm->pending) {  // a split running, or a creation whose group has not ended
    *asyncError = ncclInProgress;
    return ncclSuccess;
  }
  const DeferredOutcome done = finishedDeferred(comm);  // done: joins at once
  const collieComm_t c = done.c;
  if (done.result != ncclSuccess || !c) {
    *asyncError = done.result != ncclSuccess ? done.result : ncclInvalidUsage;
    return ncclSuccess;
  }
  collieResult_t e = collieSuccess;
  collieResult_t r = collieCommGetAsyncError(c, &e);
  if (r != collieSuccess) return fromCollie(comm, fn, r);
  *asyncError = fromCollieCode(e);
  if (e != collieSuccess && e != collieInProgress) {
    fail(comm, *asyncError, "%s", collieWhy(e).c_str());  // collieCommGetAsyncError recorded the failure's message
  }
  return ncclSuccess;
}

NCCL_ABI(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  const char* fn = "ncclCommCount";
  if (!count) return fail(comm, ncclInvalidArgument, "%s: count is NULL", fn);
  collieComm_t c = nullptr;
  NCCL_TRY(resolve(comm, fn, &c));
  return fromCollie(comm, fn, collieCommCount(c, count));
}

// The device the communicator was created for: devlist[i] of ncclCommInitAll (i when devlist is NULL and CUDA is
// in use), else the device of the caller's current CUDA context at init (a split inherits its parent's).
NCCL_ABI(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  const char* fn = "ncclCommCuDevice";
  if (!comm || !device) return fail(comm, ncclInvalidArgument, "%s: comm or device is NULL", fn);
  if (comm->device < 0) {
    return fail(comm, ncclInvalidUsage,
                "%s: this communicator has no CUDA device: the process had not initialised CUDA when it was created "
                "(a host-only communicator)",
                fn);
  }
  *device = comm->device;
  return ncclSuccess;
}

NCCL_ABI(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  const char* fn = "ncclCommUserRank";
  if (!rank) return fail(comm, ncclInvalidArgument, "%s: rank is NULL", fn);
  collieComm_t c = nullptr;
  NCCL_TRY(resolve(comm, fn, &c));
  return fromCollie(comm, fn, collieCommUserRank(c, rank));
}

// Registration: collie needs none (it stages or copies any buffer), so a handle only records the buffer, and
// ncclCommDeregister checks that the handle is one of this communicator's. ncclCommDestroy frees handles left over.
NCCL_ABI(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  const char* fn = "ncclCommRegister";
  if (!handle) return fail(comm, ncclInvalidArgument, "%s: handle is NULL", fn);
  *handle = nullptr;
  if (!buff && size > 0) return fail(comm, ncclInvalidArgument, "%s: buff is NULL with size=%zu", fn, size);
  return guarded(comm, fn, [&]() -> ncclResult_t {
    collieComm_t c = nullptr;
    NCCL_TRY(resolveLive(comm, fn, &c));
    auto* r = new collie_nccl::Registration{buff, size};
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->registrations.insert(r);
    *handle = r;
    return ncclSuccess;
  });
}

NCCL_ABI(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  const char* fn = "ncclCommDeregister";
  if (!comm) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  collie_nccl::Registration* r = static_cast<collie_nccl::Registration*>(handle);
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->registrations.erase(r) == 1) {
      delete r;
      return ncclSuccess;
    }
  }
  return fail(comm, ncclInvalidArgument, "%s: handle %p is not a registration of this comm", fn, handle);
}

NCCL_ABI(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  (void)buff;
  (void)size;
  (void)winFlags;
  if (win) *win = nullptr;
  return unsupported(comm, ncclInvalidUsage, "ncclCommWindowRegister",
                     "symmetric memory windows serve NCCL's device-side API, which collie does not have");
}

NCCL_ABI(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  (void)win;
  return unsupported(comm, ncclInvalidUsage, "ncclCommWindowDeregister",
                     "symmetric memory windows serve NCCL's device-side API, which collie does not have");
}

// Custom reductions: collie's own (collieRedOpCreatePreMulSum), whose op values are NCCL's (ncclNumOps + i) and
// pass through toCollieOp unchanged.
NCCL_ABI(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  const char* fn = "ncclRedOpCreatePreMulSum";
  if (!op) return fail(comm, ncclInvalidArgument, "%s: op is NULL", fn);
  collieComm_t c = nullptr;
  collieDataType_t t = collieInt8;
  NCCL_TRY(resolve(comm, fn, &c));
  NCCL_TRY(toCollieType(comm, fn, datatype, &t));
  static_assert(static_cast<int>(ncclScalarDevice) == collieScalarDevice &&
                static_cast<int>(ncclScalarHostImmediate) == collieScalarHostImmediate);
  collieRedOp_t made = collieSum;
  const ncclResult_t r = fromCollie(
      comm, fn, collieRedOpCreatePreMulSum(&made, scalar, t, sameBits<collieScalarResidence_t>(residence), c));
  if (r == ncclSuccess) *op = static_cast<ncclRedOp_t>(made);
  return r;
}

NCCL_ABI(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  const char* fn = "ncclRedOpDestroy";
  collieComm_t c = nullptr;
  NCCL_TRY(resolve(comm, fn, &c));
  return fromCollie(comm, fn, collieRedOpDestroy(sameBits<collieRedOp_t>(op), c));
}
