// A call's path through a communicator's parts (see communicator.hpp): validate, classify memory, run inline or
// queue, plan and execute; plus the failure state, barrier and abort. Calls on device buffers are staged in
// device_calls.cpp, groups recorded and issued in group.cpp; split.cpp and shrink.cpp make new communicators from
// this one.
#include "core/communicator.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/call_fingerprint.hpp"
#include "core/cuda_plugin.hpp"
#include "core/device_stager.hpp"
#include "core/group.hpp"
#include "core/host_identity.hpp"
#include "core/validate.hpp"

namespace collie::core {

using algorithms::Collective;

// ---- Creation ------------------------------------------------------------------------------------------------

CommImpl::CommImpl(int rank, int nranks, const Options& options, std::shared_ptr<LinkShare> share)
    : rank_(rank),
      nranks_(nranks),
      name_(options.name.empty() ? std::string("comm") : options.name),
      timeout_(options.timeout.count() > 0 ? options.timeout : std::chrono::milliseconds(base::params::timeoutMs())),
      connectMode_(options.connect),
      share_(share ? std::move(share) : std::make_shared<LinkShare>(std::make_shared<ShareFamily>())),
      poller_(share_->family->poller),
      links_(share_->links),
      planner_(rank, nranks, name_),
      recorder_(rank, nranks, name_, static_cast<size_t>(base::params::flightRecorderEntries())),
      abort_(share_->family->abort),
      queue_(
          [this](std::vector<OpDesc>& ops, ErrorCode& code, std::string& message) {
            try {
              runBatch(ops);
            } catch (const Error& e) {
              code = e.code();
              message = e.what();
            } catch (const std::exception& e) {
              code = ErrorCode::InternalError;
              message = e.what();
            }
            finishDevice(ops, code, message);
          },
          [this] { closeIfAborted(); }) {}

void CreationStop::stop() {
  family_->abort.store(true);
  family_->poller.wake();  // an executor waiting on the table's all-gather or calibration looks at the flag now
}

std::unique_ptr<CommImpl> CommImpl::create(int nranks, const UniqueIdData& id, int rank, const Options& options,
                                           const CreationStop* stop) {
  COLLIE_ARG_CHECK(nranks >= 1, "nranks=%d: expected at least 1", nranks);
  COLLIE_ARG_CHECK(rank >= 0 && rank < nranks, "rank=%d: expected 0 <= rank < nranks=%d", rank, nranks);
  AlgoSelection selection = currentAlgoSelection();  // a bad COLLIE_ALGO fails here, naming the variable
  std::unique_ptr<CommImpl> comm(
      new CommImpl(rank, nranks, options, stop ? std::make_shared<LinkShare>(stop->family_) : nullptr));
  comm->secret_ = id.secret;
  comm->links_.transports = makeTransports();
  transport::PeerInfo self = localPeerInfo(rank);
  for (auto& t : comm->links_.transports) t->listen(self);
  const AgreedSettings settings = agreedSettings(comm->connectMode_, comm->links_.transports);
  comm->links_.cardDirectory = settings.cardDirectory != 0;
  auto peers = bootstrapExchange(id, rank, nranks, self, settings, comm->timeout_, &comm->abort_);  // self, tree peers
  comm->planner_.tuner() = Tuner(comm->measured_.modelFor({}), AlgoSelection());  // the table's all-gather: Send/Recv
  comm->connect(peers, tableGatherNeeded(nranks));  // decided alike on every rank, whatever its table holds
  comm->planner_.tuner() = Tuner(comm->measured_.modelFor(kindsInUse(comm->links_.transports, comm->links_.ctx.peers)),
                                 std::move(selection));
  comm->calibrate(comm->links_.ctx.peers);
  comm->closeGatherOnlyLinks();  // lazy connection: O(1) links per rank from here on
  comm->startRecording();        // the user's calls only: call #0 is the first on every rank
  COLLIE_INFO(base::kLogInit, "%s rank %d of %d ready", comm->name_.c_str(), rank, nranks);
  return comm;
}

void CommImpl::connect(const std::vector<transport::PeerInfo>& peers, bool gatherFirst) {
  transport::CommContext ctx;
  ctx.rank = rank_;
  ctx.nranks = nranks_;
  ctx.peers = peers;
  memcpy(ctx.secret, secret_.data(), secret_.size());
  ctx.name = name_;
  ctx.timeout = timeout_;
  ctx.poller = &poller_;
  ctx.abort = &abort_;
  initLinks(links_, std::move(ctx));
  planner_.setTransports(transportNames(links_), links_.peerTransport);
  recorder_.setTransportNames(transportNames(links_));
  recorder_.setQueuedSource([this] { return queue_.queued(); });
  std::vector<transport::Connection*> raw;
  for (auto& c : links_.conns) raw.push_back(c.get());
  anySource_ = std::make_unique<AnySourceMatcher>(
      rank_, nranks_, [this](int p) { return links_.conns[static_cast<size_t>(p)].get(); }, poller_, abort_, name_);
  executor_ = std::make_unique<Executor>(rank_, nranks_, std::move(raw), poller_, abort_, name_);
  execConfig_.timeout = timeout_;
  execConfig_.spin = std::chrono::microseconds(base::params::spinUs());
  execConfig_.yieldWhileSpinning = links_.oversubscribed || gatherFirst;  // a partial table undercounts this host
  if (gatherFirst)
    gatherTable();
  else if (links_.cardDirectory)
    showCardBook();
  setSpinPolicy();  // now that every rank's host is known
  planner_.setTransports(transportNames(links_), links_.peerTransport);
  planner_.setHosts(hostLayoutOf(links_.ctx.peers));
  if (connectEagerly(connectMode_, links_.transports)) {
    {
      std::unique_lock<FamilyGate> gate(share_->family->use, std::defer_lock);
      if (share_->family->shared.load(std::memory_order_acquire)) gate.lock();  // a sharing child: the parent's links
      connectAll(links_);
    }
    for (int p = 0; p < nranks_; ++p) executor_->setConnection(p, links_.conns[static_cast<size_t>(p)].get());
    barrier();  // every rank is connected before anyone returns
  }
}

// A waiting thread spins before it sleeps. The calling thread of a blocking call has nothing else to do, so it
// gives the CPU away while spinning only when this host has more ranks than CPUs. The progress thread runs async
// calls while the caller computes (PyTorch's DDP: backward goes on while a bucket is all-reduced), so it also
// yields when the ranks take every CPU: then its spin would take the CPU from the ranks' own threads (a yield
// with nothing else runnable returns at once, so an idle host keeps the spin's latency).
void CommImpl::setSpinPolicy() {
  execConfig_.yieldWhileSpinning = links_.oversubscribed;
  progressConfig_ = execConfig_;
  progressConfig_.yieldWhileSpinning = links_.oversubscribed || links_.cpusTaken;
}

// Lazy connection: before a call runs, its schedules' peers without a connection are connected, all at once. This
// rank dials them (Transport::dial) and each answers from its accept loop whatever it is doing (in another call,
// in another communicator, computing), so no pattern of calls can leave both ends waiting for each other, Send/Recv
// whose ends are different calls included; when both ends of a pair dial at once, one dial is turned away and the
// other connects the pair (transport/dialer.hpp). No coordinator is needed.
void CommImpl::ensureConnected(const std::vector<Job>& jobs) {
  if (links_.connectedPeers.load(std::memory_order_relaxed) == nranks_ - 1) return;
  // A repeated call of one schedule found connected before needs no walk (connections are dropped only by a failure,
  // which ends the communicator, and at init; the generation tells a schedule rebuilt at the same address).
  const bool single = jobs.size() == 1;
  if (single && jobs[0].schedule == connectedSchedule_ && jobs[0].scheduleGeneration == connectedGeneration_) return;
  wanted_.resize(static_cast<size_t>(nranks_), 0);
  std::vector<int> missing;
  auto want = [&](int p) {
    if (p < 0 || p == rank_ || wanted_[static_cast<size_t>(p)] || links_.conns[static_cast<size_t>(p)]) return;
    wanted_[static_cast<size_t>(p)] = 1;
    missing.push_back(p);
  };
  for (const Job& job : jobs) {
    for (const algorithms::Step& step : job.schedule->steps) {
      want(step.sendPeer);
      want(step.recvPeer);
    }
  }
  for (int p : missing) wanted_[static_cast<size_t>(p)] = 0;
  if (!missing.empty()) {
    try {
      connectMissing(missing);
    } catch (const transport::MismatchError&) {
      throw;  // a dialled peer that failed on mismatched calls said which (Dialer::refuseAll): nothing to look for
    } catch (const Error& e) {
      explainConnectFailure(jobs, missing, e);
    }
  }
  if (single) {
    connectedSchedule_ = jobs[0].schedule;
    connectedGeneration_ = jobs[0].scheduleGeneration;
  }
}

void CommImpl::connectMissing(const std::vector<int>& peers, bool dial, bool midRun) {
  try {
    connectPeers(links_, peers, dial);
  } catch (...) {
    connectFailed_ = true;  // whatever the error: execute() ends the communicator (see there)
    throw;
  }
  for (int p : peers) {
    transport::Connection* c = links_.conns[static_cast<size_t>(p)].get();
    if (midRun) {
      executor_->adoptConnection(p, c);
    } else {
      executor_->setConnection(p, c);
    }
  }
  executorGeneration_ = links_.generation;  // made here and given to the executor
}

void CommImpl::takeAnsweredConnections() {
  std::vector<int> answered;
  for (const auto& t : links_.transports)
    for (int p : t->answeredPeers())
      if (p != rank_ && !links_.conns[static_cast<size_t>(p)]) answered.push_back(p);
  if (!answered.empty()) connectMissing(answered, true, /*midRun=*/true);
}

void CommImpl::startRecording() {
  planner_.setRecorder(&recorder_);
  trace_ = CallTrace::open(rank_, nranks_, name_, recorder_.clock(), transportNames(links_));
  recorder_.setTrace(trace_.get());
  executor_->setTrace(trace_.get());
  // The look at idle connections judges the user's calls only: init's internal calls are numbered from 0 as well,
  // so a peer already in the user's call #0 would contradict this rank's init call #0. A child that shares its
  // parent's connections looks as well: another member's messages carry another tag (split gives no two members of
  // a family the same), which nothing contradicts.
  executor_->beginUserCalls();
  Executor::LookHooks hooks;
  hooks.takeAnswered = [this] { takeAnsweredConnections(); };
  hooks.showWaiting = [this](const std::vector<transport::Fingerprint>& calls) {
    for (const auto& t : links_.transports) t->showWaitingCalls(calls);
  };
  hooks.askWaiting = [this](int peer) {
    const int t = links_.transportOf[static_cast<size_t>(peer)];
    return t < 0 ? std::nullopt : links_.transports[static_cast<size_t>(t)]->askWaitingCalls(links_.ctx, peer);
  };
  // In a sharing family a peer may wait in another member's call: it is judged against this rank's call of that
  // member, which the planners record while a child shares.
  planner_.setFamily(share_->family.get());
  for (const auto& t : links_.transports) t->showLastCall(share_->family->lastCall);
  hooks.recall = [family = share_->family](const transport::Fingerprint& theirs) {
    return family->recalledCall(communicatorTag(theirs), theirs.call);
  };
  executor_->enableLook(&planner_.history(), std::move(hooks));
}

CommStats CommImpl::stats() const {
  CommStats out;
  out.timed = recorder_.statsTimed();
  std::vector<CallStats::Row> rows = recorder_.statsRows();
  for (const CallStats::Row& r : rows) {
    CollectiveStats s;
    s.collective = algorithms::collectiveName(r.coll);
    s.algorithm = algorithms::algorithmName(r.algo);
    s.calls = r.calls;
    s.bytes = r.bytes;
    s.seconds = r.seconds;
    out.rows.push_back(std::move(s));
  }
  out.summary =
      base::format("%s rank %d of %d: %llu call(s)\n%s", name_.c_str(), rank_, nranks_,
                   static_cast<unsigned long long>(recorder_.calls()), CallStats::summary(rows, out.timed).c_str());
  return out;
}

// A peer that never connects may have failed a call that this rank's connected peers saw go wrong: with eager
// connection this rank would have read their poison (a mismatch) while waiting in the call, so it looks for it
// on them now (briefly) and reports the mismatch. A timeout is reported as the executor's, naming the call and
// the peers not connected.
void CommImpl::explainConnectFailure(const std::vector<Job>& jobs, const std::vector<int>& missing, const Error& e) {
  // Long enough for a connected peer waiting in this call to check its links (the executor does once a second).
  constexpr auto kPoisonGrace = std::chrono::milliseconds(1500);
  // An abort, or this rank's own mistake (a refused argument, settings that differ from a peer's), is the answer.
  if (abort_.load() || (e.code() != ErrorCode::RemoteError && e.code() != ErrorCode::Timeout)) throw;
  const auto until = std::chrono::steady_clock::now() + kPoisonGrace;
  for (int p = 0; p < nranks_; ++p) {
    auto& c = links_.conns[static_cast<size_t>(p)];
    if (p != rank_ && c) c->revealPoison(until);  // throws MismatchError, which execute() reports
  }
  if (e.code() != ErrorCode::Timeout) throw;
  std::string waiting;
  for (int p : missing)
    if (!links_.conns[static_cast<size_t>(p)])
      waiting += base::format("%srank %d (not connected yet)", waiting.empty() ? "" : ", ", p);
  COLLIE_FAIL(ErrorCode::Timeout,
              "%s rank %d: no progress for %lld ms in %s while waiting on %s (a peer may have died, hung, or called a "
              "different collective): %s",
              name_.c_str(), rank_, static_cast<long long>(timeout_.count()),
              callText(jobs.front().sendFp, rank_, missing.front()).c_str(), waiting.c_str(), e.what());
}

CommImpl::~CommImpl() {
  groupForget(this);  // calls of it recorded in this thread's open group go, and fail the group
  queue_.drain();
  recorder_.setQueuedSource({});  // the queue goes before the recorder
  if (base::params::flightRecorderDestroy()) recorder_.dump("destroy");
  if (base::params::stats() == 1) {
    std::fprintf(stderr, "collie stats: %s\n", stats().summary.c_str());
  } else if (base::logEnabled(base::LogLevel::Info, base::kLogColl)) {
    COLLIE_INFO(base::kLogColl, "stats: %s", stats().summary.c_str());
  }
  stager_.reset();  // every staged call was released by the progress thread
  if (planner_.tag() != 0) share_->family->releaseTag(planner_.tag());
  // The connections close with share_ (~LinkShare) once no sharing child uses them either.
}

// ---- Failure ------------------------------------------------------------------------------------------------

bool CommImpl::recordFailure(ErrorCode code, const std::string& message) {
  std::lock_guard<std::mutex> lock(failMu_);
  if (failCode_.load() != ErrorCode::Success) return false;
  failMessage_ = message;
  failCode_.store(code);
  return true;
}

// Called on the thread that runs the executor, or by closeIfAborted while no call runs: the only ones that may touch
// the connections.
void CommImpl::fail(ErrorCode code, const std::string& message, const transport::MismatchRecord* mismatch) {
  if (recordFailure(code, message))
    COLLIE_WARN(base::kLogColl, "%s rank %d failed: %s", name_.c_str(), rank_, message.c_str());
  share_->family->recordFailure(code, base::format("%s rank %d failed: %s", name_.c_str(), rank_, message.c_str()));
  // Closing our connections makes peers that wait on us fail at once instead of at their timeout; a mismatch
  // goes with it, so that they report the mismatch rather than this rank's going away.
  closeLinks(links_, mismatch);
  if (share_->family->shared.load(std::memory_order_acquire)) {
    // A sharing family's connections are its root's (a member's own links are only the pairs it borrowed): a
    // failure of one fails them all, and the peers of every member must hear of it now, not at their timeout.
    LinkShare* root = share_.get();
    while (root->lender) root = root->lender.get();
    if (root != share_.get()) closeLinks(root->links, mismatch);
  }
}

void CommImpl::closeLinks(Links& links, const transport::MismatchRecord* mismatch) {
  // Dials are turned down from now on, and connections answered but not taken yet are taken to be closed or
  // poisoned with the others.
  for (auto& t : links.transports) {
    for (auto& c : t->refuseDials(links.ctx, mismatch)) {
      auto& slot = links.conns[static_cast<size_t>(c->peer())];
      if (!slot) slot = std::move(c);
    }
  }
  for (auto& c : links.conns) {
    if (!c) continue;
    if (mismatch) {
      c->poison(*mismatch);
    } else {
      c->close();
    }
  }
}

std::shared_ptr<void> CommImpl::takeTurn() {
  if (!share_->family->shared.load(std::memory_order_acquire)) return nullptr;
  std::shared_ptr<void> turn = beginTurn(share_->family, this, timeout_);
  if (!turn)
    COLLIE_FAIL(ErrorCode::Timeout,
                "%s rank %d: waited %lld ms for the calls issued before this one on a communicator that shares its "
                "connections to end (call the communicators of a family in the same order on every rank)",
                name_.c_str(), rank_, static_cast<long long>(timeout_.count()));
  return turn;
}

const ShareFamily* CommImpl::sharingFamily() const {
  return share_->family->shared.load(std::memory_order_acquire) ? share_->family.get() : nullptr;
}

std::string CommImpl::failureMessage() const {
  std::lock_guard<std::mutex> lock(failMu_);
  return failMessage_;
}

// Any thread: flags the abort and wakes the executor, which fails its call; the connections are closed by the
// executing thread, never under a running call, or here when no call runs (closeIfAborted).
void CommImpl::abort() {
  recordFailure(ErrorCode::InvalidUsage,
                base::format("%s rank %d: the communicator was aborted", name_.c_str(), rank_));
  share_->family->recordFailure(ErrorCode::InvalidUsage, base::format("%s rank %d was aborted", name_.c_str(), rank_));
  abort_.store(true);  // seq_cst, like the queue's claim: a call that ends after this sees it (AbortCheck)
  poller_.wake();
  recorder_.dump("abort");
  closeIfAborted();
}

void CommImpl::closeIfAborted() noexcept {
  if (!abort_.load() || !queue_.beginInline()) return;  // not aborted, or a call runs: its end looks again
  ProgressQueue::InlineClaim claim{queue_};
  if (closedByAbort_) return;
  // A communicator of a sharing family running a call on another thread drives the shared connections: it sees the
  // abort and closes them itself.
  std::unique_lock<FamilyGate> shared(share_->family->use, std::defer_lock);
  if (share_->family->shared.load() && !shared.try_lock()) return;
  closedByAbort_ = true;
  adoptFamilyFailure();  // aborted as one of a sharing family: say which
  try {
    fail(ErrorCode::InvalidUsage, failureMessage());
  } catch (const std::exception& e) {
    COLLIE_WARN(base::kLogColl, "%s rank %d: closing the connections after abort: %s", name_.c_str(), rank_, e.what());
  }
}

void CommImpl::adoptFamilyFailure() {
  if (failCode_.load() != ErrorCode::Success || !share_->family->failed.load()) return;
  const auto [code, why] = share_->family->failureOf();
  recordFailure(code, base::format("%s rank %d shares its connections with a communicator that failed (%s)",
                                   name_.c_str(), rank_, why.c_str()));
}

void CommImpl::validate(const OpDesc& op) {
  adoptFamilyFailure();
  if (failCode_.load() != ErrorCode::Success) {
    throw Error(failCode_.load(), base::format("%s rank %d failed earlier and cannot be used: %s", name_.c_str(), rank_,
                                               failureMessage().c_str()));
  }
  validateOp(op, rank_, nranks_);
}

// ---- Execution ------------------------------------------------------------------------------------------------

OpDesc CommImpl::matchAnySource(const OpDesc& op, const ExecConfig& config) {
  // The sender may be any peer: each must be connected. On first use this rank dials those it has no connection to
  // (they answer whatever they do); a transport that cannot dial at any time connects every pair at init.
  if (links_.connectedPeers.load() != nranks_ - 1) {
    std::vector<int> missing;
    for (int p = 0; p < nranks_; ++p)
      if (p != rank_ && !links_.conns[static_cast<size_t>(p)]) missing.push_back(p);
    const bool canDial = std::all_of(links_.transports.begin(), links_.transports.end(),
                                     [](const auto& t) { return t->dialsAnyTime(); });
    COLLIE_USAGE_CHECK(canDial,
                       "%s rank %d: a receive from any rank needs a connection to every peer, and this communicator "
                       "connects on first use over a transport that cannot dial at any time (it has %d of %d): "
                       "create it with ConnectMode::Eager (COLLIE_CONNECT=eager)",
                       name_.c_str(), rank_, links_.connectedPeers.load(), nranks_ - 1);
    connectMissing(missing);
  }
  AnySourceMatcher::Call call;
  call.expected = [&](int peer) { return planner_.recvFingerprint(op, peer); };
  call.lastSeenText = [&](int peer) { return executor_->lastSeenText(peer); };
  call.mine = [&](const transport::Fingerprint& theirs) { return executor_->mineFor(theirs); };
  call.text = base::format("Recv(%s, %zu from any rank)", base::dataTypeName(op.type), op.count);
  OpDesc named = op;
  named.root = anySource_->match(call, config);
  if (op.source) *op.source = named.root;
  return named;
}

void CommImpl::execute(const std::vector<OpDesc>& ops, const ExecConfig& config, const std::vector<Job>* repeated) {
  // One call of a sharing family at a time drives its connections (link_share.hpp).
  std::unique_lock<FamilyGate> shared(share_->family->use, std::defer_lock);
  if (share_->family->shared.load(std::memory_order_acquire) && !shared.try_lock_for(timeout_)) {
    if (repeated) recorder_.finish(false);
    COLLIE_FAIL(ErrorCode::Timeout,
                "%s rank %d: waited %lld ms for a call of a communicator that shares its connections to end (call the "
                "communicators of a family in the same order on every rank)",
                name_.c_str(), rank_, static_cast<long long>(timeout_.count()));
  }
  adoptFamilyFailure();
  if (links_.generation != executorGeneration_) {  // a sharing child connected peers through these links
    for (int p = 0; p < nranks_; ++p) executor_->setConnection(p, links_.conns[static_cast<size_t>(p)].get());
    executorGeneration_ = links_.generation;
  }
  if (failCode_.load() != ErrorCode::Success) {
    if (repeated) recorder_.finish(false);  // Planner::repeat began its entry: it ends, failed, having sent nothing
    throw Error(failCode_.load(), failureMessage());
  }
  try {
    const bool anySource = ops.size() == 1 && ops[0].root == kAnySource && ops[0].coll == Collective::Recv;
    const std::vector<Job>& jobs = repeated    ? *repeated
                                   : anySource ? planner_.plan({matchAnySource(ops[0], config)})
                                               : planner_.plan(ops);
    ensureConnected(jobs);
    executor_->run(jobs, config);
    recorder_.finish(true);
  } catch (const transport::MismatchError& e) {
    // The ranks called different things: the caller's fault, but the links are out of step, so fatal.
    const transport::MismatchRecord r = planner_.explain(e.record());
    const std::string message = base::format("%s rank %d: %s", name_.c_str(), rank_, describeMismatch(r).c_str());
    recorder_.failed(ErrorCode::InvalidUsage, message);
    fail(ErrorCode::InvalidUsage, message, &r);
    throw Error(ErrorCode::InvalidUsage, message);
  } catch (const Error& e) {
    recorder_.failed(e.code(), e.what());
    // Any failure to connect is fatal too: a dial given up leaves its pairs half made on both ends (dialer.hpp).
    if (base::isFatal(e.code()) || abort_.load() || connectFailed_) fail(e.code(), e.what());
    throw;
  } catch (const std::exception& e) {
    recorder_.failed(ErrorCode::InternalError, e.what());
    fail(ErrorCode::InternalError, e.what());
    throw Error(ErrorCode::InternalError, e.what());
  }
}

void CommImpl::runGeneral(OpDesc op) {
  if (inGroup()) return recordInGroup(std::move(op));
  validate(op);
  classifyMemory(op, rank_, boundDevice_);
  if (op.device) return runDevice(std::move(op));
  const std::shared_ptr<void> turn = takeTurn();  // held until the call ends
  AbortCheck abortCheck{*this};
  if (!queue_.beginInline()) {
    // Async work is queued: run after it, on the progress thread, to keep the order.
    auto work = std::make_shared<WorkState>();
    queue_.enqueue({std::move(op)}, work);
    work->wait();
    if (work->code != ErrorCode::Success) throw Error(work->code, work->message);
    return;
  }
  ProgressQueue::InlineClaim claim{queue_};
  armPrepared(op);
  inlineOps_.clear();  // one vector for every inline call: no allocation per call
  inlineOps_.push_back(std::move(op));
  execute(inlineOps_, execConfig_);
}

std::shared_ptr<WorkState> CommImpl::runAsync(OpDesc op) {
  auto work = std::make_shared<WorkState>();
  if (op.root == kAnySource && op.coll == Collective::Recv) op.source = &work->source;  // Work::source()
  op.work = work;
  if (inGroup()) {
    recordInGroup(std::move(op));
    return work;
  }
  validate(op);
  classifyMemory(op, rank_, boundDevice_);  // device buffers: the Work completes once the result is back
  std::unique_lock<std::mutex> deviceLock(deviceMu_, std::defer_lock);
  if (op.device) deviceLock.lock();
  std::shared_ptr<void> turn = takeTurn();
  if (op.device) stageDevice(op);
  std::vector<OpDesc> ops{std::move(op)};
  queue_.enqueue(std::move(ops), work, std::move(turn));
  return work;
}

// ---- Barrier ----------------------------------------------------------------------------------------------------

void CommImpl::barrier() {
  // An AllReduce makes every rank depend on every other one; a few bytes suffice.
  std::vector<uint8_t> token(static_cast<size_t>(nranks_), 0);
  OpDesc op;
  op.coll = Collective::AllReduce;
  op.send = op.recv = token.data();
  op.count = token.size();
  op.type = DataType::Uint8;
  op.op = ReduceOp::Max;
  op.barrier = true;  // not to be taken for a user's AllReduce of the same shape
  if (inGroup()) {
    const std::string why = base::format("%s rank %d: barrier called inside a group", name_.c_str(), rank_);
    groupRefuse(ErrorCode::InvalidUsage, why);
    throw Error(ErrorCode::InvalidUsage, why);
  }
  run(op);
}

}  // namespace collie::core
