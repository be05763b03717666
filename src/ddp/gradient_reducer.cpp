// GradientReducer: bucketed, overlapped gradient averaging (include/collie/ddp.hpp, gradient_reducer.hpp).
#include "ddp/gradient_reducer.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "base/log.hpp"
#include "core/api_access.hpp"
#include "core/call_trace.hpp"
#include "core/flight_recorder.hpp"

namespace collie::ddp {

using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// FNV-1a over what must agree across ranks: the number of parameters, and each one's count, type and whether
// it is broadcast (data given).
uint64_t fingerprint(const std::vector<Parameter>& params) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(params.size());
  for (const Parameter& p : params) {
    mix(p.count);
    mix(static_cast<uint64_t>(p.type));
    mix(p.data != nullptr);
  }
  return h;
}

// Every rank learns whether the parameter lists agree; when they do not, every rank throws, naming the first
// difference from rank 0's list.
void checkSameParameters(Communicator& comm, const std::vector<Parameter>& params) {
  const int n = comm.size();
  std::vector<uint64_t> all(static_cast<size_t>(n));
  uint64_t mine = fingerprint(params);
  comm.allGather(&mine, all.data(), 1, DataType::Uint64);
  if (std::all_of(all.begin(), all.end(), [&](uint64_t v) { return v == all[0]; })) return;
  // Differ somewhere: rank 0 broadcasts its list (size first), every rank compares.
  uint64_t count0 = params.size();
  comm.broadcast(&count0, &count0, 1, DataType::Uint64, 0);
  std::vector<uint64_t> desc0(2 * count0);
  if (comm.rank() == 0)
    for (size_t i = 0; i < params.size(); ++i) {
      desc0[2 * i] = params[i].count;
      desc0[2 * i + 1] = static_cast<uint64_t>(params[i].type) | (params[i].data ? 0x100u : 0u);
    }
  comm.broadcast(desc0.data(), desc0.data(), desc0.size(), DataType::Uint64, 0);
  std::string why;
  if (count0 != params.size()) {
    why = base::format("%zu parameters here, %llu on rank 0", params.size(), static_cast<unsigned long long>(count0));
  } else {
    for (size_t i = 0; i < params.size() && why.empty(); ++i) {
      const Parameter& p = params[i];
      uint64_t t0 = desc0[2 * i + 1] & 0xff;
      bool d0 = (desc0[2 * i + 1] & 0x100u) != 0;
      if (desc0[2 * i] != p.count || t0 != static_cast<uint64_t>(p.type))
        why = base::format("parameter %zu (%s): %zu %s elements here, %llu %s on rank 0", i, p.name.c_str(), p.count,
                           base::dataTypeName(p.type), static_cast<unsigned long long>(desc0[2 * i]),
                           base::dataTypeName(static_cast<DataType>(t0)));
      else if (d0 != (p.data != nullptr))
        why = base::format("parameter %zu (%s): data %s here, %s on rank 0", i, p.name.c_str(),
                           p.data ? "given" : "null", d0 ? "given" : "null");
    }
    if (why.empty()) why = "another rank's list differs from rank 0's";
  }
  COLLIE_FAIL(ErrorCode::InvalidUsage, "GradientReducer: the parameter lists differ across ranks (rank %d: %s)",
              comm.rank(), why.c_str());
}

}  // namespace

size_t GradBucket::bytes() const { return count_ * base::dataTypeSize(type_); }

// ---- Bucket assignment ---------------------------------------------------------------------------------------

std::vector<std::vector<size_t>> GradientReducer::computeBuckets(const std::vector<Parameter>& params,
                                                                 std::span<const size_t> order, size_t firstCapBytes,
                                                                 size_t capBytes) {
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    bool first = true;  // no bucket of this key closed yet
  };
  // Key: (type, device type, device index).
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<std::pair<size_t, std::vector<size_t>>> closed;  // (position of first member in order, members)
  std::vector<size_t> position(params.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    COLLIE_ARG_CHECK(order[k] < params.size(), "bucket order names parameter %zu of %zu", order[k], params.size());
    position[order[k]] = k;
  }
  for (size_t i : order) {
    const Parameter& p = params[i];
    auto key = std::make_tuple(static_cast<int>(p.type), static_cast<int>(p.device.type), p.device.index);
    Open& b = open[key];
    b.members.push_back(i);
    b.bytes += p.count * base::dataTypeSize(p.type);
    if (b.bytes >= (b.first ? firstCapBytes : capBytes)) {
      closed.emplace_back(position[b.members.front()], std::move(b.members));
      b.members.clear();
      b.bytes = 0;
      b.first = false;
    }
  }
  for (auto& [key, b] : open)
    if (!b.members.empty()) closed.emplace_back(position[b.members.front()], std::move(b.members));
  std::stable_sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<size_t>> out;
  out.reserve(closed.size());
  for (auto& c : closed) out.push_back(std::move(c.second));
  return out;
}

// ---- Impl ----------------------------------------------------------------------------------------------------

size_t GradientReducer::Impl::elemSize(size_t i) const { return base::dataTypeSize(params[i].type); }

void* GradientReducer::Impl::slot(size_t i) const {
  const Bucket& b = *buckets[bucketOf[i]];
  return b.mem.get() + offsetOf[i] * elemSize(i);
}

void GradientReducer::Impl::layout(const std::vector<std::vector<size_t>>& assignment) {
  std::vector<std::unique_ptr<Bucket>> next;
  std::vector<size_t> nextBucketOf(params.size()), nextOffsetOf(params.size());
  for (size_t k = 0; k < assignment.size(); ++k) {
    auto b = std::make_unique<Bucket>();
    const auto& members = assignment[k];
    COLLIE_INTERNAL_CHECK(!members.empty(), "empty bucket %zu", k);
    const Parameter& first = params[members.front()];
    b->device = first.device;
    b->face.index_ = k;
    b->face.isLast_ = k + 1 == assignment.size();
    b->face.type_ = first.type;
    size_t count = 0;
    for (size_t i : members) {
      b->face.params_.push_back(i);
      b->face.offsets_.push_back(count);
      nextBucketOf[i] = k;
      nextOffsetOf[i] = count;
      count += params[i].count;
    }
    b->face.count_ = count;
    // Value-initialised: zeros, so a gradient-as-bucket-view gradient starts at zero.
    b->mem = std::make_unique<std::byte[]>(std::max<size_t>(count * base::dataTypeSize(first.type), 1));
    b->face.data_ = b->mem.get();
    next.push_back(std::move(b));
  }
  if (!buckets.empty()) {  // keep what the gradients hold (gradient-as-bucket-view: the slots are the gradients)
    for (size_t i = 0; i < params.size(); ++i) {
      std::byte* dst = next[nextBucketOf[i]]->mem.get() + nextOffsetOf[i] * elemSize(i);
      std::memcpy(dst, slot(i), params[i].count * elemSize(i));
    }
  }
  buckets = std::move(next);
  bucketOf = std::move(nextBucketOf);
  offsetOf = std::move(nextOffsetOf);
  ++layoutVersion;
  stats.buckets = buckets.size();
}

GradientReducer::Impl::Impl(Communicator& c, std::vector<Parameter> p, ReducerOptions o)
    : comm(c), trace(InternalAccess::coreComm(c).trace()), params(std::move(p)), opts(std::move(o)) {}

void GradientReducer::Impl::countDown(size_t i) {
  Bucket& b = *buckets[bucketOf[i]];
  if (trace && b.readySince == 0) b.readySince = core::TickClock::ticks();
  --b.pending;
}

void GradientReducer::Impl::beginIteration() {
  active = true;
  if (!rebuilt) readyOrder.clear();  // the order of the first iteration that completes decides
  std::fill(ready.begin(), ready.end(), Ready::None);
  std::fill(writeBack.begin(), writeBack.end(), nullptr);
  for (auto& b : buckets) {
    b->pending = b->face.params_.size();
    b->launched = false;
    b->reduction = {};
    b->readySince = b->launchedAt = 0;
  }
  nextLaunch = 0;
  anyLaunched = false;
  copyInTime = 0;
}

void GradientReducer::Impl::launchReady() {
  while (nextLaunch < buckets.size() && buckets[nextLaunch]->pending == 0) {
    Bucket& b = *buckets[nextLaunch++];
    if (trace) {
      b.launchedAt = core::TickClock::ticks();
      const uint64_t since = b.readySince ? b.readySince : b.launchedAt;  // a bucket of no parameters
      trace->ddpSpan("ready", nextLaunch - 1, b.face.count_ * base::dataTypeSize(b.face.type_), since, b.launchedAt);
    }
    if (!anyLaunched) {
      anyLaunched = true;
      firstLaunch = Clock::now();
    }
    if (hook)
      b.reduction = hook(comm, b.face);
    else
      b.reduction.work = comm.allReduceAsync(b.face.data_, b.face.data_, b.face.count_, b.face.type_,
                                             prescaled(b) ? ReduceOp::Sum : ReduceOp::Avg);
    b.launched = true;
  }
}

void GradientReducer::Impl::abandon() noexcept {
  for (auto& b : buckets) {
    if (!b->launched) continue;
    try {
      if (b->reduction.work.valid()) b->reduction.work.wait();
    } catch (...) {
    }
    b->launched = false;
    b->reduction = {};
  }
  active = false;
}

void GradientReducer::Impl::copyIn(size_t i, void* dst, const void* src) {
  const size_t n = params[i].count;
  if (!prescaled(*buckets[bucketOf[i]])) {
    if (dst != src) std::memcpy(dst, src, n * elemSize(i));
    return;
  }
  const int ranks = comm.size();
  if (params[i].type == DataType::Float32) {
    const float f = static_cast<float>(ranks);
    auto* d = static_cast<float*>(dst);
    const auto* x = static_cast<const float*>(src);
    for (size_t k = 0; k < n; ++k) d[k] = x[k] / f;
  } else {
    const double f = static_cast<double>(ranks);
    auto* d = static_cast<double*>(dst);
    const auto* x = static_cast<const double*>(src);
    for (size_t k = 0; k < n; ++k) d[k] = x[k] / f;
  }
}

void GradientReducer::Impl::writeBackOne(size_t i) {
  void* src = slot(i);
  const size_t bytes = params[i].count * elemSize(i);
  if (opts.findUnusedParameters && !used[i]) {  // unused everywhere: the gradient stays as it was
    if (opts.gradientAsBucketView && !saved[i].empty()) std::memcpy(src, saved[i].data(), bytes);
    return;
  }
  if (writeBack[i] && writeBack[i] != src) std::memcpy(writeBack[i], src, bytes);
}

void GradientReducer::Impl::rebuild() {
  // Rank 0's readiness order decides, so that every rank builds the same buckets.
  std::vector<uint64_t> order(params.size());
  if (readyOrder.size() == params.size()) std::copy(readyOrder.begin(), readyOrder.end(), order.begin());
  comm.broadcast(order.data(), order.data(), order.size(), DataType::Uint64, 0);
  std::vector<size_t> seen(params.size(), 0);
  std::vector<size_t> o(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    COLLIE_INTERNAL_CHECK(order[k] < params.size() && !seen[order[k]]++,
                          "rank 0's gradient order is not a permutation");
    o[k] = static_cast<size_t>(order[k]);
  }
  auto assignment = computeBuckets(params, o, opts.firstBucketCapBytes, opts.bucketCapBytes);
  rebuilt = true;
  std::vector<std::vector<size_t>> current;
  for (auto& b : buckets) current.push_back(b->face.params_);
  if (assignment == current) return;
  layout(assignment);
  COLLIE_INFO(base::kLogColl, "GradientReducer: rebuilt %zu buckets from the first iteration's gradient order",
              buckets.size());
}

// ---- GradientReducer -------------------------------------------------------------------------------------------

GradientReducer::GradientReducer(Communicator& comm, std::vector<Parameter> params, ReducerOptions options)
    : impl_(std::make_unique<Impl>(comm, std::move(params), std::move(options))) {
  Impl& s = *impl_;
  COLLIE_ARG_CHECK(s.opts.bucketCapBytes > 0 && s.opts.firstBucketCapBytes > 0, "bucket caps must be positive");
  for (size_t i = 0; i < s.params.size(); ++i) {
    const Parameter& p = s.params[i];
    COLLIE_ARG_CHECK(base::isValidDataType(static_cast<int>(p.type)), "parameter %zu (%s): invalid type %d", i,
                     p.name.c_str(), static_cast<int>(p.type));
    if (s.params[i].name.empty()) s.params[i].name = "parameter " + std::to_string(i);
  }
  checkSameParameters(comm, s.params);
  if (s.opts.broadcastParameters) {
    std::vector<HostBuffer> bufs;
    for (const Parameter& p : s.params)
      if (p.data) bufs.push_back({p.data, p.count, p.type});
    broadcastCoalesced(comm, bufs, 0);
  }
  s.ready.assign(s.params.size(), Impl::Ready::None);
  s.writeBack.assign(s.params.size(), nullptr);
  s.saved.resize(s.params.size());
  s.used.assign(s.params.size(), 1);
  std::vector<size_t> reverse(s.params.size());
  std::iota(reverse.rbegin(), reverse.rend(), size_t{0});
  s.layout(computeBuckets(s.params, reverse, s.opts.firstBucketCapBytes, s.opts.bucketCapBytes));
  s.layoutVersion = 0;
}

GradientReducer::~GradientReducer() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->abandon();
}

void GradientReducer::registerCommHook(CommHook hook) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  COLLIE_USAGE_CHECK(!impl_->active, "registerCommHook during an iteration");
  COLLIE_ARG_CHECK(static_cast<bool>(hook), "registerCommHook: empty hook");
  impl_->hook = std::move(hook);
}

void GradientReducer::markReady(size_t i, void* grad) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.requireSync) return;
  COLLIE_ARG_CHECK(i < s.params.size(), "markReady(%zu): there are %zu parameters", i, s.params.size());
  COLLIE_ARG_CHECK(grad != nullptr || s.params[i].count == 0, "markReady(%zu): null gradient", i);
  if (!s.active) s.beginIteration();
  COLLIE_USAGE_CHECK(s.ready[i] == Impl::Ready::None,
                     "parameter %zu (%s) was marked ready twice in one iteration; a parameter used twice in a "
                     "forward pass still gets one gradient, so mark it once, after backward accumulated it",
                     i, s.params[i].name.c_str());
  const auto t0 = Clock::now();
  s.copyIn(i, s.slot(i), grad);
  s.copyInTime += secondsSince(t0);
  s.ready[i] = Impl::Ready::Used;
  s.writeBack[i] = grad;
  if (!s.rebuilt && s.readyOrder.size() < s.params.size()) s.readyOrder.push_back(i);
  s.countDown(i);
  try {
    s.launchReady();
  } catch (...) {
    s.abandon();
    throw;
  }
}

void GradientReducer::markUnused(size_t i, void* grad) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.requireSync) return;
  COLLIE_ARG_CHECK(i < s.params.size(), "markUnused(%zu): there are %zu parameters", i, s.params.size());
  COLLIE_USAGE_CHECK(s.opts.findUnusedParameters, "markUnused(%zu) needs ReducerOptions::findUnusedParameters", i);
  if (!s.active) s.beginIteration();
  COLLIE_USAGE_CHECK(s.ready[i] == Impl::Ready::None, "parameter %zu (%s) was marked twice in one iteration", i,
                     s.params[i].name.c_str());
  size_t bytes = s.params[i].count * s.elemSize(i);
  if (s.opts.gradientAsBucketView)
    s.saved[i].assign(static_cast<std::byte*>(s.slot(i)), static_cast<std::byte*>(s.slot(i)) + bytes);
  std::memset(s.slot(i), 0, bytes);
  s.ready[i] = Impl::Ready::Unused;
  s.writeBack[i] = grad;
  s.countDown(i);
  try {
    s.launchReady();
  } catch (...) {
    s.abandon();
    throw;
  }
}

void* GradientReducer::bucketView(size_t i) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  COLLIE_ARG_CHECK(i < impl_->params.size(), "bucketView(%zu): there are %zu parameters", i, impl_->params.size());
  return impl_->slot(i);
}

void GradientReducer::finalize() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.requireSync && !s.active) return;
  if (s.params.empty()) return;
  const auto t0 = Clock::now();
  s.stats.firstLaunchToFinalize = s.anyLaunched ? std::chrono::duration<double>(t0 - s.firstLaunch).count() : 0.0;
  s.stats.launchedEarly = s.nextLaunch;
  if (!s.active) s.beginIteration();  // nothing was marked: every parameter is unused

  std::vector<size_t> missing;
  for (size_t i = 0; i < s.params.size(); ++i)
    if (s.ready[i] == Impl::Ready::None) missing.push_back(i);
  if (!missing.empty() && !s.opts.findUnusedParameters) {
    s.abandon();
    std::string names;
    for (size_t k = 0; k < missing.size() && k < 20; ++k) names += (k ? ", " : "") + s.params[missing[k]].name;
    if (missing.size() > 20) names += base::format(", ... (%zu in all)", missing.size());
    COLLIE_FAIL(ErrorCode::InvalidUsage,
                "GradientReducer (rank %d): %zu of %zu parameters got no gradient in this iteration: %s. They took "
                "no part in computing the loss. Either make every parameter contribute, remove them from the "
                "model, or enable findUnusedParameters (which reduces zeros for them)",
                s.comm.rank(), missing.size(), s.params.size(), names.c_str());
  }

  Work usedWork;
  std::vector<int32_t> localUsed;
  try {
    for (size_t i : missing) {  // findUnusedParameters: zeros take their place
      size_t bytes = s.params[i].count * s.elemSize(i);
      if (s.opts.gradientAsBucketView)
        s.saved[i].assign(static_cast<std::byte*>(s.slot(i)), static_cast<std::byte*>(s.slot(i)) + bytes);
      std::memset(s.slot(i), 0, bytes);
      s.ready[i] = Impl::Ready::Unused;
      if (!s.rebuilt && s.readyOrder.size() < s.params.size()) s.readyOrder.push_back(i);
      s.countDown(i);
    }
    s.launchReady();
    COLLIE_INTERNAL_CHECK(s.nextLaunch == s.buckets.size(), "bucket %zu not launched", s.nextLaunch);
    if (s.opts.findUnusedParameters) {
      localUsed.resize(s.params.size());
      for (size_t i = 0; i < s.params.size(); ++i) localUsed[i] = s.ready[i] == Impl::Ready::Used ? 1 : 0;
      s.used.assign(s.params.size(), 0);
      usedWork =
          s.comm.allReduceAsync(localUsed.data(), s.used.data(), s.params.size(), DataType::Int32, ReduceOp::Max);
    }
    // Each bucket's averages are written back as soon as it is done, while later buckets still communicate.
    // With findUnusedParameters the write-back needs the used map, which completes last.
    double waited = 0, wroteBack = 0;
    for (auto& b : s.buckets) {
      const auto tw = Clock::now();
      if (b->reduction.work.valid()) b->reduction.work.wait();
      waited += secondsSince(tw);
      if (b->reduction.then) b->reduction.then();
      if (s.trace)
        s.trace->ddpSpan("reduce", static_cast<size_t>(&b - s.buckets.data()),
                         b->face.count_ * base::dataTypeSize(b->face.type_), b->launchedAt, core::TickClock::ticks());
      b->launched = false;
      b->reduction = {};
      if (!s.opts.findUnusedParameters) {
        const auto twb = Clock::now();
        for (size_t i : b->face.params_) s.writeBackOne(i);
        wroteBack += secondsSince(twb);
      }
    }
    if (usedWork.valid()) {
      const auto tw = Clock::now();
      usedWork.wait();
      waited += secondsSince(tw);
      const auto twb = Clock::now();
      for (size_t i = 0; i < s.params.size(); ++i) s.writeBackOne(i);
      wroteBack += secondsSince(twb);
    }
    s.stats.waitSeconds = waited;
    s.stats.writeBackSeconds = wroteBack;
  } catch (...) {
    s.abandon();
    if (usedWork.valid()) try {
        usedWork.wait();
      } catch (...) {
      }
    throw;
  }

  s.stats.copyInSeconds = s.copyInTime;
  for (auto& v : s.saved) v.clear();
  s.active = false;
  ++s.stats.iterations;
  if (s.opts.rebuildBuckets && !s.rebuilt && !s.opts.findUnusedParameters) s.rebuild();
  s.stats.finalizeSeconds = secondsSince(t0);
}

bool GradientReducer::inIteration() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->active;
}

void GradientReducer::setRequireSync(bool requireSync) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  COLLIE_USAGE_CHECK(!impl_->active, "no_sync switched during an iteration (between markReady and finalize)");
  impl_->requireSync = requireSync;
}

bool GradientReducer::requireSync() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requireSync;
}

bool GradientReducer::locallyUsed(size_t i) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  COLLIE_ARG_CHECK(i < impl_->params.size(), "locallyUsed(%zu): there are %zu parameters", i, impl_->params.size());
  return impl_->ready[i] == Impl::Ready::Used;
}

bool GradientReducer::globallyUsed(size_t i) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  COLLIE_ARG_CHECK(i < impl_->params.size(), "globallyUsed(%zu): there are %zu parameters", i, impl_->params.size());
  return impl_->used[i] != 0;
}

size_t GradientReducer::numParameters() const { return impl_->params.size(); }
const Parameter& GradientReducer::parameter(size_t i) const {
  COLLIE_ARG_CHECK(i < impl_->params.size(), "parameter(%zu): there are %zu parameters", i, impl_->params.size());
  return impl_->params[i];
}
Communicator& GradientReducer::communicator() { return impl_->comm; }
const ReducerOptions& GradientReducer::options() const { return impl_->opts; }

std::vector<std::vector<size_t>> GradientReducer::bucketAssignment() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::vector<size_t>> out;
  for (auto& b : impl_->buckets) out.push_back(b->face.params_);
  return out;
}

uint64_t GradientReducer::layoutVersion() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->layoutVersion;
}

bool GradientReducer::bucketsRebuilt() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rebuilt;
}

ReducerStats GradientReducer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace collie::ddp
