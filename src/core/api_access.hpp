// The library's own way past the C++ API (include/collie/collie.hpp), for the few things the C API needs that
// the C++ API does not offer: calls ordered on a CUDA stream, binding a communicator to a GPU. It also defines the
// public classes' opaque parts: Communicator::Impl (which owns the core communicator) and Work::State (the
// completion state, core::WorkState). Internal: never included by a public header.
#pragma once

#include <collie/collie.hpp>
#include <memory>

#include "core/communicator.hpp"

namespace collie {

struct Communicator::Impl {
  explicit Impl(std::unique_ptr<core::CommImpl> c) : comm(std::move(c)) {}
  std::unique_ptr<core::CommImpl> comm;
};

struct InternalAccess {
  /// The core communicator behind `c`.
  static core::CommImpl& coreComm(Communicator& c) { return *c.impl_->comm; }
  /// A Communicator for a core communicator (null for null).
  static std::unique_ptr<Communicator> wrap(std::unique_ptr<core::CommImpl> comm) {
    if (!comm) return nullptr;
    return std::unique_ptr<Communicator>(new Communicator(std::make_unique<Communicator::Impl>(std::move(comm))));
  }
  /// Communicator::create whose wait another thread may end (`stop`: the C API's abort of a non-blocking init).
  static std::unique_ptr<Communicator> create(int nranks, const UniqueId& id, int rank, const Options& options,
                                              const core::CreationStop& stop) {
    return wrap(core::CommImpl::create(nranks, core::decodeUniqueId(id.raw), rank, options, &stop));
  }
  /// A Work handle on a completion state.
  static Work work(std::shared_ptr<core::WorkState> state) { return Work(std::move(state)); }

  /// A C API call (collie.h): on host buffers it blocks until done; on device buffers it is enqueued on `stream`
  /// (NULL: the legacy default stream) and returns at once (device_stager.hpp).
  static void runOnStream(Communicator& c, algorithms::Collective coll, const void* send, void* recv, size_t count,
                          DataType type, const Reduction& op, int root, void* stream) {
    core::CommImpl& comm = coreComm(c);
    const core::CallKey key{send, recv, count, coll, type, op.op(), op.factorBits(), op.factorType(), root};
    if (stream == nullptr && comm.runPrepared(key)) return;
    core::OpDesc d = core::makeOp(coll, send, recv, count, type, op, root);
    d.stream = stream;
    d.streamOrdered = true;
    comm.runGeneral(std::move(d));
  }
  /// Binds `c` to a GPU (collieCommInitAll's devlist): device buffers on another GPU are refused.
  static void bindDevice(Communicator& c, int device) { coreComm(c).bindDevice(device); }
};

}  // namespace collie
