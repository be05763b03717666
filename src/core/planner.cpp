// The plan of each call: tuner choice, cached schedule, job, and the CallInfo record (see planner.hpp).
#include "core/planner.hpp"

#include <algorithm>
#include <cctype>

#include "base/datatypes.hpp"
#include "base/log.hpp"
#include "core/link_share.hpp"

namespace collie::core {

using algorithms::Collective;

void Planner::setTransports(std::vector<std::string> preference, std::vector<std::string> byRank) {
  preference_ = std::move(preference);
  peerTransport_ = std::move(byRank);
  transportCache_.clear();
  memo_.valid = false;
}

void Planner::setHosts(algorithms::patterns::HostLayout hosts) {
  hosts_ = std::move(hosts);
  cache_.clear();         // schedules of the hierarchical algorithm follow the layout
  ++scheduleGeneration_;  // a schedule made later may sit where a cleared one was (the executor's prepared run)
  transportCache_.clear();
  memo_.valid = false;
}

const algorithms::Schedule& Planner::schedule(algorithms::Algorithm algo, const algorithms::ScheduleKey& key) {
  const algorithms::ScheduleId k{algo, key};
  auto it = cache_.find(k);
  if (it != cache_.end()) return it->second;
  if (cache_.size() > 4096) {  // only the executing thread touches the cache; nothing refers to it now
    cache_.clear();
    transportCache_.clear();
    memo_.valid = false;
    ++scheduleGeneration_;
  }
  return cache_.emplace(k, algorithms::build(algo, key, hosts_)).first->second;
}

uint32_t Planner::transportsOf(const algorithms::Schedule& schedule) {
  auto it = transportCache_.find(&schedule);
  if (it != transportCache_.end()) return it->second;
  uint32_t used = 0;
  auto mark = [&](int peer) {
    if (peer < 0 || peer == rank_ || static_cast<size_t>(peer) >= peerTransport_.size()) return;
    const std::string& name = peerTransport_[static_cast<size_t>(peer)];
    for (size_t t = 0; t < preference_.size() && t < 32; ++t)
      if (name == preference_[t]) used |= 1u << t;
  };
  for (const algorithms::Step& step : schedule.steps) {
    mark(step.sendPeer);
    mark(step.recvPeer);
  }
  return transportCache_.emplace(&schedule, used).first->second;
}

void Planner::setRecorder(FlightRecorder* recorder) {
  recorder_ = recorder;
  collectiveCalls_ = 0;
  std::fill(sends_.begin(), sends_.end(), 0);
  std::fill(recvs_.begin(), recvs_.end(), 0);
  history_ = CallHistory{};
}

const std::vector<Job>& Planner::plan(const std::vector<OpDesc>& ops) {
  jobs_.clear();
  repeat_.valid = false;
  bool prevP2P = false;
  for (const OpDesc& op : ops) {
    const size_t elemBytes = base::dataTypeSize(op.type);
    const algorithms::ScheduleKey key{op.coll, rank_, nranks_, op.count, op.root, elemBytes};
    const size_t bytes = op.count * elemBytes;
    // The tuner decides from (collective, ranks, bytes, element size) and the schedule from the key, which holds
    // them all: a repeated call with the same key reuses the last choice.
    if (!memo_.valid || !(memo_.key == key)) {
      memo_.valid = false;  // schedule() below may clear the cache, and with it the memo
      TunedPlan plan = tuner_.choose(op.coll, nranks_, bytes, elemBytes);
      COLLIE_TRACE(base::kLogTune, "%s rank %d: %s of %zu x %s: %s, %zu-byte slices, %d in flight", name_.c_str(),
                   rank_, algorithms::collectiveName(op.coll), op.count, base::dataTypeName(op.type),
                   algorithms::algorithmName(plan.algorithm), plan.sliceBytes, plan.slicesInFlight);
      const algorithms::Schedule* sch = &schedule(plan.algorithm, key);
      memo_ = Memo{true, key, bytes, plan, sch, transportsOf(*sch)};
    }
    const TunedPlan& plan = memo_.plan;
    Job job;
    job.schedule = memo_.schedule;
    job.scheduleGeneration = scheduleGeneration_;
    job.buffers = JobBuffers{op.send, op.recv, op.type, op.op, op.factor};
    job.sliceBytes = plan.sliceBytes;
    job.slicesInFlight = plan.slicesInFlight;
    bool p2p = op.coll == Collective::Send || op.coll == Collective::Recv;
    job.concurrentWithPrevious = p2p && prevP2P && ops.size() > 1;
    uint32_t* counter = &collectiveCalls_;
    if (p2p) {
      const auto peer = static_cast<size_t>(op.root);
      counter = op.coll == Collective::Send ? &sends_[peer] : &recvs_[peer];
      job.sendFp = job.recvFp = fingerprintOf(op, (*counter)++, rank_, tag_);
    } else {
      job.sendFp = job.recvFp =
          fingerprintOf(op, collectiveCalls_++, rank_, tag_, static_cast<int>(memo_.plan.algorithm));
      remember(job.sendFp);
    }
    if (ops.size() == 1)
      repeat_ =
          Repeat{true, keyOf(op), makeOp(op.coll, op.send, op.recv, op.count, op.type, op.op, op.root), counter, !p2p};
    prevP2P = p2p;
    jobs_.push_back(job);

    Record record{true, op.coll, plan.algorithm, memo_.transports, bytes, plan.sliceBytes};
    if (recorder_) recorder_->begin(op, plan.algorithm, record.transports, bytes);
    if (record == last_) continue;  // only this thread writes last_: reading it unlocked here is safe
    std::lock_guard<std::mutex> lock(callMu_);
    last_ = record;
  }
  return jobs_;
}

const std::vector<Job>* Planner::repeat(const CallKey& key) {
  if (!repeat_.valid || !memo_.valid || !(repeat_.key == key)) return nullptr;
  Job& job = jobs_[0];
  job.sendFp.call = job.recvFp.call = (*repeat_.counter)++;  // the rest of a fingerprint is the call's arguments
  if (repeat_.collective) remember(job.sendFp);
  if (recorder_) recorder_->begin(repeat_.op, memo_.plan.algorithm, memo_.transports, memo_.bytes);
  return &jobs_;
}

void Planner::remember(const transport::Fingerprint& fp) {
  history_.add(fp);
  if (!family_) return;  // init's calls (numbered apart from the user's) are not shown
  family_->lastCall->publish(fp);
  if (family_->shared.load(std::memory_order_relaxed)) [[unlikely]]
    family_->recordCall(tag_, fp);
}

transport::Fingerprint Planner::recvFingerprint(const OpDesc& op, int peer) const {
  OpDesc named = op;
  named.root = peer;
  return fingerprintOf(named, recvs_[static_cast<size_t>(peer)], rank_, tag_);
}

transport::MismatchRecord Planner::explain(transport::MismatchRecord r) const {
  if (r.rankB != rank_ || !isCollectiveFingerprint(r.a)) return r;
  const transport::Fingerprint* mine = history_.find(r.a.call);
  if (mine && communicatorTag(*mine) == communicatorTag(r.a)) {
    r.b = *mine;
  } else if (family_ != nullptr) {  // another member's call of a sharing family: as this rank made it, if recorded
    if (std::optional<transport::Fingerprint> other = family_->recalledCall(communicatorTag(r.a), r.a.call))
      r.b = *other;
  }
  return r;
}

CallInfo Planner::lastCall() const {
  Record record;
  {
    std::lock_guard<std::mutex> lock(callMu_);
    record = last_;
  }
  CallInfo info;
  if (!record.valid) return info;
  info.collective = algorithms::collectiveName(record.coll);
  for (char& ch : info.collective) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  info.algorithm = algorithms::algorithmName(record.algo);
  info.transport = transportsNamed(record.transports, preference_);
  info.bytes = record.bytes;
  info.sliceBytes = record.sliceBytes;
  return info;
}

}  // namespace collie::core
