#include "core/communicator.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/topology.hpp"
#include "core/cuda_plugin.hpp"
#include "core/device_stager.hpp"
#include "core/tuner.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace collie::core {

using algorithms::Collective;

// ---- WorkState ------------------------------------------------------------------------------------------------

void WorkState::complete(ErrorCode c, std::string msg) {
  {
    std::lock_guard<std::mutex> lock(mu);
    code = c;
    message = std::move(msg);
    done = true;
  }
  cv.notify_all();
}

void WorkState::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
}

bool WorkState::test() {
  std::lock_guard<std::mutex> lock(mu);
  return done;
}

// ---- Creation ------------------------------------------------------------------------------------------------

// The transports a communicator may use, in order of preference.
std::vector<std::unique_ptr<transport::Transport>> makeTransports() {
  std::vector<std::unique_ptr<transport::Transport>> list;
  if (base::params::shmDisable() == 0) list.push_back(std::make_unique<transport::ShmTransport>());  // same host
  list.push_back(std::make_unique<transport::TcpTransport>());
  return list;
}

transport::PeerInfo localPeerInfo(int rank) {
  transport::PeerInfo self;
  self.rank = rank;
  self.pid = getpid();
  self.hostHash = localHostHash();
  gethostname(self.hostName, sizeof(self.hostName) - 1);
  return self;
}

CommImpl::CommImpl(int rank, int nranks, const Options& options)
    : rank_(rank),
      nranks_(nranks),
      name_(options.name.empty() ? std::string("comm") : options.name),
      timeout_(options.timeout.count() > 0 ? options.timeout : std::chrono::milliseconds(base::params::timeoutMs())) {}

std::unique_ptr<CommImpl> CommImpl::create(int nranks, const UniqueIdData& id, int rank, const Options& options) {
  COLLIE_ARG_CHECK(nranks >= 1, "nranks=%d: expected at least 1", nranks);
  COLLIE_ARG_CHECK(rank >= 0 && rank < nranks, "rank=%d: expected 0 <= rank < nranks=%d", rank, nranks);
  AlgoSelection selection = currentAlgoSelection();  // a bad COLLIE_ALGO fails here, naming the variable
  std::unique_ptr<CommImpl> comm(new CommImpl(rank, nranks, options));
  comm->secret_ = id.secret;
  comm->transports_ = makeTransports();
  transport::PeerInfo self = localPeerInfo(rank);
  for (auto& t : comm->transports_) t->listen(self);
  auto peers = bootstrapExchange(id, rank, nranks, self, comm->timeout_);
  comm->tuner_ = Tuner(comm->measured_.modelFor(comm->kindsInUse(peers)), std::move(selection));
  comm->connectAll(peers, id.secret);
  comm->calibrate(peers);
  COLLIE_INFO(base::kLogInit, "%s rank %d of %d ready", comm->name_.c_str(), rank, nranks);
  return comm;
}

void CommImpl::connectAll(const std::vector<transport::PeerInfo>& peers, const std::array<uint8_t, 16>& secret) {
  // More ranks of this communicator on this host than CPUs for them: waiting ranks must yield when they spin.
  int localRanks = 0;
  for (const auto& p : peers) localRanks += p.hostHash == peers[static_cast<size_t>(rank_)].hostHash ? 1 : 0;
  cpu_set_t cpus;
  int ncpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  oversubscribed_ = localRanks > ncpus;
  cpuShare_ = std::max(1.0, static_cast<double>(localRanks) / std::max(1, ncpus));
  transport::CommContext ctx;
  ctx.rank = rank_;
  ctx.nranks = nranks_;
  ctx.peers = peers;
  memcpy(ctx.secret, secret.data(), secret.size());
  ctx.name = name_;
  ctx.timeout = timeout_;
  ctx.poller = &poller_;
  // For each peer the first transport that can connect wins; both sides decide from the same table.
  std::vector<std::vector<int>> chosen(transports_.size());
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    size_t t = 0;
    while (t < transports_.size() &&
           !transports_[t]->canConnect(peers[static_cast<size_t>(rank_)], peers[static_cast<size_t>(r)]))
      ++t;
    COLLIE_ENFORCE(t < transports_.size(), ErrorCode::InvalidUsage, "%s rank %d: no transport can reach rank %d",
                   name_.c_str(), rank_, r);
    chosen[t].push_back(r);
  }
  conns_.clear();
  conns_.resize(static_cast<size_t>(nranks_));
  peerTransport_.assign(static_cast<size_t>(nranks_), "self");
  for (size_t t = 0; t < transports_.size(); ++t)
    for (int r : chosen[t]) peerTransport_[static_cast<size_t>(r)] = transports_[t]->name();
  for (size_t t = 0; t < transports_.size(); ++t) {
    if (chosen[t].empty()) continue;
    auto conns = transports_[t]->connect(ctx, chosen[t]);
    for (size_t i = 0; i < chosen[t].size(); ++i) conns_[static_cast<size_t>(chosen[t][i])] = std::move(conns[i]);
    COLLIE_INFO(base::kLogInit, "%s rank %d: %zu peer(s) over %s", name_.c_str(), rank_, chosen[t].size(),
                transports_[t]->name());
  }
  conns_[static_cast<size_t>(rank_)] = transport::makeSelfConnection(rank_);
  std::vector<transport::Connection*> raw;
  for (auto& c : conns_) raw.push_back(c.get());
  executor_ = std::make_unique<Executor>(rank_, nranks_, std::move(raw), poller_, abort_, name_);
  barrier();  // every rank is connected before anyone returns
}

CommImpl::~CommImpl() {
  {
    std::unique_lock<std::mutex> lock(qmu_);
    qcv_.wait(lock, [&] { return pending_ == 0 && !inlineRunning_; });
    stop_ = true;
  }
  qcv_.notify_all();
  if (progress_.joinable()) progress_.join();
  stager_.reset();  // every staged call was released by the progress thread
  for (auto& c : conns_)
    if (c) c->close();
}

// ---- Failure ------------------------------------------------------------------------------------------------

bool CommImpl::recordFailure(ErrorCode code, const std::string& message) {
  std::lock_guard<std::mutex> lock(failMu_);
  if (failCode_.load() != ErrorCode::Success) return false;
  failMessage_ = message;
  failCode_.store(code);
  return true;
}

// Called on the thread that runs the executor, the only one that may touch the connections.
void CommImpl::fail(ErrorCode code, const std::string& message) {
  if (recordFailure(code, message))
    COLLIE_WARN(base::kLogColl, "%s rank %d failed: %s", name_.c_str(), rank_, message.c_str());
  // Closing our connections makes peers that wait on us fail at once instead of at their timeout.
  for (auto& c : conns_)
    if (c) c->close();
}

std::string CommImpl::failureMessage() const {
  std::lock_guard<std::mutex> lock(failMu_);
  return failMessage_;
}

// Any thread: flags the abort and wakes the executor, which fails its call; the connections are closed by the
// executing thread or by the destructor, never under a running call.
void CommImpl::abort() {
  recordFailure(ErrorCode::InvalidUsage,
                base::format("%s rank %d: the communicator was aborted", name_.c_str(), rank_));
  abort_.store(true);
  poller_.wake();
}

// ---- Execution ------------------------------------------------------------------------------------------------

const algorithms::Schedule& CommImpl::schedule(algorithms::Algorithm algo, const algorithms::ScheduleKey& key) {
  const algorithms::ScheduleId k{algo, key};
  auto it = cache_.find(k);
  if (it != cache_.end()) return it->second;
  if (cache_.size() > 4096) {  // only the executing thread touches the cache; nothing refers to it now
    cache_.clear();
    transportCache_.clear();
  }
  return cache_.emplace(k, algorithms::build(algo, key)).first->second;
}

const std::string& CommImpl::transportsOf(const algorithms::Schedule& schedule) {
  auto it = transportCache_.find(&schedule);
  if (it != transportCache_.end()) return it->second;
  std::vector<bool> used(transports_.size(), false);
  auto mark = [&](int peer) {
    if (peer < 0 || peer == rank_) return;
    const std::string& name = peerTransport_[static_cast<size_t>(peer)];
    for (size_t t = 0; t < transports_.size(); ++t)
      if (name == transports_[t]->name()) used[t] = true;
  };
  for (const algorithms::Step& step : schedule.steps) {
    mark(step.sendPeer);
    mark(step.recvPeer);
  }
  std::string names;
  for (size_t t = 0; t < transports_.size(); ++t)
    if (used[t]) names += (names.empty() ? "" : "+") + std::string(transports_[t]->name());
  if (names.empty()) names = "self";  // one rank, or nothing to move
  return transportCache_.emplace(&schedule, std::move(names)).first->second;
}

CallInfo CommImpl::lastCall() const {
  std::lock_guard<std::mutex> lock(callMu_);
  return lastCall_;
}

void CommImpl::execute(const std::vector<OpDesc>& ops) {
  if (failCode_.load() != ErrorCode::Success) throw Error(failCode_.load(), failureMessage());
  jobs_.clear();
  bool prevP2P = false;
  for (const OpDesc& op : ops) {
    algorithms::ScheduleKey key{op.coll, rank_, nranks_, op.count, op.root};
    TunedPlan plan = tuner_.choose(op.coll, nranks_, op.count * base::dataTypeSize(op.type));
    COLLIE_TRACE(base::kLogTune, "%s rank %d: %s of %zu x %s: %s, %zu-byte slices, %d in flight", name_.c_str(), rank_,
                 algorithms::collectiveName(op.coll), op.count, base::dataTypeName(op.type),
                 algorithms::algorithmName(plan.algorithm), plan.sliceBytes, plan.slicesInFlight);
    Job job;
    job.schedule = &schedule(plan.algorithm, key);
    job.buffers = JobBuffers{op.send, op.recv, op.type, op.op};
    job.sliceBytes = plan.sliceBytes;
    job.slicesInFlight = plan.slicesInFlight;
    bool p2p = op.coll == Collective::Send || op.coll == Collective::Recv;
    job.concurrentWithPrevious = p2p && prevP2P && ops.size() > 1;
    prevP2P = p2p;
    jobs_.push_back(job);
    CallInfo info;
    info.collective = algorithms::collectiveName(op.coll);
    for (char& ch : info.collective) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    info.algorithm = algorithms::algorithmName(plan.algorithm);
    info.transport = transportsOf(*job.schedule);
    info.bytes = op.count * base::dataTypeSize(op.type);
    info.sliceBytes = plan.sliceBytes;
    std::lock_guard<std::mutex> lock(callMu_);
    lastCall_ = std::move(info);
  }
  ExecConfig config;
  config.timeout = timeout_;
  config.spin = std::chrono::microseconds(base::params::spinUs());
  config.yieldWhileSpinning = oversubscribed_;
  try {
    executor_->run(jobs_, config);
  } catch (const Error& e) {
    if (base::isFatal(e.code()) || abort_.load()) fail(e.code(), e.what());
    throw;
  } catch (const std::exception& e) {
    fail(ErrorCode::InternalError, e.what());
    throw Error(ErrorCode::InternalError, e.what());
  }
}

void CommImpl::run(OpDesc op) {
  op.stream = StreamScope::stream();
  op.streamOrdered = StreamScope::active();
  validate(op);
  classifyMemory(op);
  if (op.device) return runDevice(std::move(op));
  if (inGroup()) {
    groupAdd(this, std::move(op));
    return;
  }
  bool runInline = false;
  {
    std::lock_guard<std::mutex> lock(qmu_);
    if (pending_ == 0 && !inlineRunning_) runInline = inlineRunning_ = true;
  }
  if (!runInline) {
    // Async work is queued: run after it, on the progress thread, to keep the order.
    auto work = std::make_shared<WorkState>();
    enqueue({std::move(op)}, work);
    work->wait();
    if (work->code != ErrorCode::Success) throw Error(work->code, work->message);
    return;
  }
  struct InlineGuard {
    CommImpl* c;
    ~InlineGuard() {
      {
        std::lock_guard<std::mutex> lock(c->qmu_);
        c->inlineRunning_ = false;
      }
      c->qcv_.notify_all();
    }
  } guard{this};
  execute({std::move(op)});
}

std::shared_ptr<WorkState> CommImpl::runAsync(OpDesc op) {
  validate(op);
  classifyMemory(op);  // device buffers: on the default stream; the Work completes once the result is back
  auto work = std::make_shared<WorkState>();
  op.work = work;
  if (op.device) {
    std::lock_guard<std::mutex> lock(deviceMu_);
    stageDevice(op);
    if (inGroup()) {
      groupAdd(this, std::move(op));
    } else {
      std::vector<OpDesc> ops{std::move(op)};
      enqueue(std::move(ops), work);
    }
    return work;
  }
  if (inGroup()) {
    groupAdd(this, std::move(op));
    return work;
  }
  std::vector<OpDesc> ops{std::move(op)};
  enqueue(std::move(ops), work);
  return work;
}

// ---- Device buffers (device_stager.hpp) ------------------------------------------------------------------------

// Under deviceMu_: makes the stager on first use, then enqueues the call's copies.
void CommImpl::stageDevice(OpDesc& op) {
  const CollieCudaPlugin& plugin = cuda::requirePlugin("a call on device buffers");
  if (!stager_) {
    stager_ = std::make_unique<DeviceStager>(plugin, op.deviceOrdinal >= 0 ? op.deviceOrdinal : boundDevice_);
  } else if (op.deviceOrdinal >= 0 && op.deviceOrdinal != stager_->device()) {
    COLLIE_FAIL(ErrorCode::InvalidUsage, "%s on rank %d: the buffers are on GPU %d, but this communicator uses GPU %d",
                algorithms::collectiveName(op.coll), rank_, op.deviceOrdinal, stager_->device());
  }
  try {
    op.staged = stager_->stage(op, rank_, nranks_, op.stream, op.streamOrdered);
  } catch (const Error& e) {
    // This rank's part of the collective will not run: the communicator cannot be used any more.
    if (base::isFatal(e.code())) recordFailure(e.code(), e.what());
    throw;
  }
}

// Calls on device buffers never run on the calling thread: they wait for the caller's stream.
void CommImpl::runDevice(OpDesc op) {
  const bool streamOrdered = op.streamOrdered;
  auto work = std::make_shared<WorkState>();
  {
    std::lock_guard<std::mutex> lock(deviceMu_);
    stageDevice(op);
    if (inGroup()) {
      groupAdd(this, std::move(op));
      return;
    }
    enqueue({std::move(op)}, work);
  }
  if (streamOrdered) return;  // a C API call: it completes in stream order; failures come out asynchronously
  work->wait();
  if (work->code != ErrorCode::Success) throw Error(work->code, work->message);
}

// On the progress thread.
void CommImpl::runBatch(std::vector<OpDesc>& ops) {
  if (failCode_.load() != ErrorCode::Success) throw Error(failCode_.load(), failureMessage());
  for (const OpDesc& op : ops) {
    if (!op.staged) continue;
    try {
      stager_->waitStaged(*op.staged, abort_);
    } catch (const Error& e) {
      fail(e.code(), e.what());  // peers waiting on this rank fail now rather than at their timeout
      throw;
    }
  }
  execute(ops);
}

// On the progress thread, after runBatch succeeded or failed: lets every staged copy-back run, records a failure
// of a stream-ordered call on the communicator (its caller has returned already), and, for calls whose
// completion is their result in device memory, waits for the copy-back.
void CommImpl::finishDevice(std::vector<OpDesc>& ops, ErrorCode& code, std::string& message) {
  bool ordered = false;
  for (OpDesc& op : ops) {
    if (!op.staged) continue;
    DeviceStager::release(*op.staged);
    ordered = ordered || op.streamOrdered;
  }
  if (code != ErrorCode::Success && ordered && recordFailure(code, message))
    COLLIE_WARN(base::kLogColl, "%s rank %d: a call on device buffers failed: %s", name_.c_str(), rank_,
                message.c_str());
  if (code != ErrorCode::Success) return;
  for (OpDesc& op : ops) {
    if (!op.staged || !op.staged->waitCopyBack) continue;
    try {
      stager_->waitDone(*op.staged);
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
      recordFailure(code, message);
      return;
    }
  }
}

std::shared_ptr<WorkState> CommImpl::submitBatch(std::vector<OpDesc> ops) {
  auto work = std::make_shared<WorkState>();
  enqueue(std::move(ops), work);
  return work;
}

void CommImpl::enqueue(std::vector<OpDesc> ops, std::shared_ptr<WorkState> work) {
  std::lock_guard<std::mutex> lock(qmu_);
  queue_.push_back(Batch{std::move(ops), std::move(work)});
  ++pending_;
  if (!progress_.joinable()) {
    // COLLIE_PIN_THREADS: the progress thread runs on the NUMA node of the rank's (calling) thread, near its memory.
    const int node = base::params::pinThreads() ? base::currentNumaNode() : -1;
    progress_ = std::thread([this, node] {
      if (node >= 0) base::bindThreadToNode(node);
      progressLoop();
    });
  }
  qcv_.notify_all();
}

void CommImpl::progressLoop() {
  while (true) {
    Batch batch;
    {
      std::unique_lock<std::mutex> lock(qmu_);
      qcv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !inlineRunning_); });
      if (queue_.empty()) return;  // stop_ with nothing left
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    ErrorCode code = ErrorCode::Success;
    std::string message;
    try {
      runBatch(batch.ops);
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
    } catch (const std::exception& e) {
      code = ErrorCode::InternalError;
      message = e.what();
    }
    finishDevice(batch.ops, code, message);
    for (OpDesc& op : batch.ops)
      if (op.work && op.work != batch.work) op.work->complete(code, message);
    batch.work->complete(code, message);
    {
      std::lock_guard<std::mutex> lock(qmu_);
      --pending_;
    }
    qcv_.notify_all();
  }
}

// ---- Barrier and split ---------------------------------------------------------------------------------------

void CommImpl::barrier() {
  // An AllReduce makes every rank depend on every other one; a few bytes suffice.
  std::vector<uint8_t> token(static_cast<size_t>(nranks_), 0);
  OpDesc op;
  op.coll = Collective::AllReduce;
  op.send = op.recv = token.data();
  op.count = token.size();
  op.type = DataType::Uint8;
  op.op = ReduceOp::Max;
  if (inGroup()) COLLIE_FAIL(ErrorCode::InvalidUsage, "barrier called inside a group");
  run(op);
}

namespace {
struct SplitEntry {
  int32_t color;
  int32_t key;
  transport::PeerInfo info;
};
}  // namespace

std::unique_ptr<CommImpl> CommImpl::split(int color, int key, const Options& options) {
  COLLIE_ARG_CHECK(color >= 0 || color == COLLIE_SPLIT_NOCOLOR,
                   "color=%d: expected a non-negative color or COLLIE_SPLIT_NOCOLOR", color);
  COLLIE_USAGE_CHECK(!inGroup(), "split called inside a group");
  const int epoch = splitCount_++;
  // New listeners for the new communicator, published through an AllGather on this one.
  auto transports = makeTransports();
  SplitEntry mine{};
  mine.color = color;
  mine.key = key;
  mine.info = localPeerInfo(-1);
  if (color != COLLIE_SPLIT_NOCOLOR)
    for (auto& t : transports) t->listen(mine.info);
  std::vector<SplitEntry> all(static_cast<size_t>(nranks_));
  OpDesc op;
  op.coll = Collective::AllGather;
  op.send = &mine;
  op.recv = all.data();
  op.count = sizeof(SplitEntry);
  op.type = DataType::Uint8;
  run(op);
  if (color == COLLIE_SPLIT_NOCOLOR) return nullptr;

  std::vector<int> members;  // old ranks, in new-rank order
  for (int r = 0; r < nranks_; ++r)
    if (all[static_cast<size_t>(r)].color == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key; });
  const int newSize = static_cast<int>(members.size());
  int newRank = -1;
  std::vector<transport::PeerInfo> peers(members.size());
  for (int i = 0; i < newSize; ++i) {
    peers[static_cast<size_t>(i)] = all[static_cast<size_t>(members[static_cast<size_t>(i)])].info;
    peers[static_cast<size_t>(i)].rank = i;
    if (members[static_cast<size_t>(i)] == rank_) newRank = i;
  }
  Options opts = options;
  if (opts.timeout.count() == 0) opts.timeout = timeout_;
  if (opts.name.empty()) opts.name = base::format("%s.split%d.color%d", name_.c_str(), epoch, color);
  std::unique_ptr<CommImpl> comm(new CommImpl(newRank, newSize, opts));
  // A secret of its own: parent secret mixed with the split epoch and the color.
  comm->secret_ = secret_;
  uint64_t salt = (static_cast<uint64_t>(epoch) << 32) ^ static_cast<uint32_t>(color) ^ 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < comm->secret_.size(); ++i) {
    comm->secret_[i] ^= static_cast<uint8_t>(salt >> (8 * (i % 8)));
    salt = salt * 6364136223846793005ull + 1442695040888963407ull;
  }
  comm->transports_ = std::move(transports);
  comm->measured_ = measured_;  // the parent's measurements, for the kinds the new communicator uses
  comm->tuner_ = Tuner(measured_.modelFor(comm->kindsInUse(peers)), tuner_.selection());
  comm->connectAll(peers, comm->secret_);
  comm->tuner_.setModel(comm->costModel(comm->kindsInUse(peers)));  // now that cpuShare_ is known
  return comm;
}

}  // namespace collie::core
