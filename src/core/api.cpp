// The C++ API (include/collie/collie.hpp): thin wrappers that describe each call and hand it to the core
// communicator (core::CommImpl, behind the opaque Communicator::Impl of api_access.hpp).
#include <collie/config.h>

#include <collie/collie.hpp>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/socket.hpp"
#include "core/api_access.hpp"
#include "core/bootstrap.hpp"
#include "core/group.hpp"

namespace collie {

using algorithms::Collective;
using core::makeOp;
using core::OpDesc;

// ---- Reduction -----------------------------------------------------------------------------------------------

Reduction Reduction::preMulSum(const void* factor, DataType type) {
  COLLIE_ARG_CHECK(factor != nullptr, "Reduction::preMulSum: factor is NULL");
  COLLIE_ARG_CHECK(base::isValidDataType(static_cast<int>(type)),
                   "Reduction::preMulSum: datatype=%d is not a collie type", static_cast<int>(type));
  Reduction r(ReduceOp::PreMulSum);
  r.factorType_ = static_cast<int>(type);
  std::memcpy(&r.factorBits_, factor, base::dataTypeSize(type));
  return r;
}

// ---- UniqueId ------------------------------------------------------------------------------------------------

UniqueId UniqueId::create() {
  sockaddr_storage addr = base::defaultLocalAddress();
  base::setAddressPort(addr, 0);
  auto data =
      core::BootstrapRoot::start(addr, core::randomSecret(), std::chrono::milliseconds(base::params::timeoutMs()));
  UniqueId id;
  id.raw = core::encodeUniqueId(data);
  return id;
}

std::string UniqueId::toString() const { return core::uniqueIdToHex(raw); }

UniqueId UniqueId::fromString(const std::string& text) {
  UniqueId id;
  id.raw = core::uniqueIdFromHex(text);
  core::decodeUniqueId(id.raw);  // validates
  return id;
}

// ---- Work ----------------------------------------------------------------------------------------------------

bool Work::test() const {
  COLLIE_USAGE_CHECK(state_ != nullptr, "test() on an empty Work");
  return state_->test();
}

void Work::wait() const {
  COLLIE_USAGE_CHECK(state_ != nullptr, "wait() on an empty Work");
  state_->wait();
  if (state_->code != ErrorCode::Success) throw Error(state_->code, state_->message);
}

ErrorCode Work::error() const {
  if (!state_ || !state_->test()) return ErrorCode::Success;
  return state_->code;
}

int Work::source() const {
  if (!state_ || !state_->test()) return -1;
  return state_->source;
}

std::string Work::errorMessage() const {
  if (!state_ || !state_->test()) return {};
  return state_->message;
}

// ---- Communicator ----------------------------------------------------------------------------------------------

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

std::unique_ptr<Communicator> Communicator::create(int nranks, const UniqueId& id, int rank, const Options& options) {
  auto data = core::decodeUniqueId(id.raw);
  return InternalAccess::wrap(core::CommImpl::create(nranks, data, rank, options));
}

std::vector<std::unique_ptr<Communicator>> Communicator::createAll(int nranks, const Options& options) {
  COLLIE_ARG_CHECK(nranks >= 1, "nranks=%d: expected at least 1", nranks);
  // Under collierun every process would make its own nranks-rank job: say so (createFromEnv makes one job).
  if (const char* launched = std::getenv("COLLIE_NRANKS"))
    COLLIE_WARN(base::kLogInit,
                "Communicator::createAll(%d) in a process started by collierun (COLLIE_NRANKS=%s): each process makes "
                "its own %d-rank job of threads; use Communicator::createFromEnv() for one job across the processes",
                nranks, launched, nranks);
  UniqueId id = UniqueId::create();
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(nranks));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        comms[static_cast<size_t>(r)] = create(nranks, id, r, options);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return comms;
}

int Communicator::rank() const { return impl_->comm->rank(); }
int Communicator::size() const { return impl_->comm->size(); }
const std::string& Communicator::name() const { return impl_->comm->name(); }

void Communicator::allReduce(const void* send, void* recv, size_t count, DataType type, Reduction op) {
  impl_->comm->run(makeOp(Collective::AllReduce, send, recv, count, type, op, 0));
}
void Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
  impl_->comm->run(makeOp(Collective::Broadcast, send, recv, count, type, ReduceOp::Sum, root));
}
void Communicator::reduce(const void* send, void* recv, size_t count, DataType type, Reduction op, int root) {
  impl_->comm->run(makeOp(Collective::Reduce, send, recv, count, type, op, root));
}
void Communicator::allGather(const void* send, void* recv, size_t sendCount, DataType type) {
  impl_->comm->run(makeOp(Collective::AllGather, send, recv, sendCount, type, ReduceOp::Sum, 0));
}
void Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DataType type, Reduction op) {
  impl_->comm->run(makeOp(Collective::ReduceScatter, send, recv, recvCount, type, op, 0));
}
void Communicator::allToAll(const void* send, void* recv, size_t count, DataType type) {
  impl_->comm->run(makeOp(Collective::AllToAll, send, recv, count, type, ReduceOp::Sum, 0));
}
void Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  impl_->comm->run(makeOp(Collective::Send, buf, nullptr, count, type, ReduceOp::Sum, peer));
}
void Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  impl_->comm->run(makeOp(Collective::Recv, nullptr, buf, count, type, ReduceOp::Sum, peer));
}
int Communicator::recvAny(void* buf, size_t count, DataType type) {
  OpDesc op = makeOp(Collective::Recv, nullptr, buf, count, type, ReduceOp::Sum, kAnySource);
  int source = -1;
  op.source = &source;
  impl_->comm->run(std::move(op));
  return source;
}
void Communicator::barrier() { impl_->comm->barrier(); }

Work Communicator::allReduceAsync(const void* send, void* recv, size_t count, DataType type, Reduction op) {
  return Work(impl_->comm->runAsync(makeOp(Collective::AllReduce, send, recv, count, type, op, 0)));
}
Work Communicator::broadcastAsync(const void* send, void* recv, size_t count, DataType type, int root) {
  return Work(impl_->comm->runAsync(makeOp(Collective::Broadcast, send, recv, count, type, ReduceOp::Sum, root)));
}
Work Communicator::reduceAsync(const void* send, void* recv, size_t count, DataType type, Reduction op, int root) {
  return Work(impl_->comm->runAsync(makeOp(Collective::Reduce, send, recv, count, type, op, root)));
}
Work Communicator::allGatherAsync(const void* send, void* recv, size_t sendCount, DataType type) {
  return Work(impl_->comm->runAsync(makeOp(Collective::AllGather, send, recv, sendCount, type, ReduceOp::Sum, 0)));
}
Work Communicator::reduceScatterAsync(const void* send, void* recv, size_t recvCount, DataType type, Reduction op) {
  return Work(impl_->comm->runAsync(makeOp(Collective::ReduceScatter, send, recv, recvCount, type, op, 0)));
}
Work Communicator::allToAllAsync(const void* send, void* recv, size_t count, DataType type) {
  return Work(impl_->comm->runAsync(makeOp(Collective::AllToAll, send, recv, count, type, ReduceOp::Sum, 0)));
}
Work Communicator::sendAsync(const void* buf, size_t count, DataType type, int peer) {
  return Work(impl_->comm->runAsync(makeOp(Collective::Send, buf, nullptr, count, type, ReduceOp::Sum, peer)));
}
Work Communicator::recvAsync(void* buf, size_t count, DataType type, int peer) {
  return Work(impl_->comm->runAsync(makeOp(Collective::Recv, nullptr, buf, count, type, ReduceOp::Sum, peer)));
}

Work Communicator::recvAnyAsync(void* buf, size_t count, DataType type) {
  return recvAsync(buf, count, type, kAnySource);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const Options& options) {
  return InternalAccess::wrap(impl_->comm->split(color, key, options));
}

std::unique_ptr<Communicator> Communicator::shrink(std::span<const int> exclude, const Options& options) {
  return InternalAccess::wrap(impl_->comm->shrink(std::vector<int>(exclude.begin(), exclude.end()), options));
}

void Communicator::abort() { impl_->comm->abort(); }
ErrorCode Communicator::asyncError() const { return impl_->comm->asyncError(); }
CallInfo Communicator::lastCall() const { return impl_->comm->lastCall(); }
CommStats Communicator::stats() const { return impl_->comm->stats(); }
int Communicator::connectedPeers() const { return impl_->comm->connectedPeers(); }

int Communicator::knownContactCards() const { return impl_->comm->knownContactCards(); }

void Communicator::checkSpan(size_t want, size_t have, const char* what) {
  try {
    COLLIE_ARG_CHECK(have >= want, "%s span holds %zu elements, expected at least %zu", what, have, want);
  } catch (const Error& e) {
    core::groupRefuse(e.code(), e.what());  // a call refused inside a group fails the group (group.hpp)
    throw;
  }
}

void groupStart() { core::groupStart(); }
void groupEnd() { core::groupEnd(); }
void groupEndAsync() { core::groupEndAsync(); }
void groupFail(ErrorCode code, const std::string& why) {
  COLLIE_USAGE_CHECK(core::inGroup(), "groupFail outside a group (groupStart first)");
  COLLIE_USAGE_CHECK(code != ErrorCode::Success && code != ErrorCode::InProgress && static_cast<int>(code) >= 0 &&
                         code <= ErrorCode::Timeout,
                     "groupFail with code %d: name a failure (an ErrorCode other than Success and InProgress)",
                     static_cast<int>(code));
  core::groupRefuse(code, why);
}
const char* versionString() { return COLLIE_VERSION_STRING; }

}  // namespace collie
