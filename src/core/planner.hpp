// Planner: turns a batch of calls into the executor's jobs. For each call the tuner picks the algorithm and its
// slicing, the schedule comes from a cache (built on first use), and the choice is recorded as the
// communicator's CallInfo (Communicator::lastCall): collective, algorithm, the transports of the peers the
// schedule touches, bytes and slice size. Each call is numbered and fingerprinted here (call_fingerprint.hpp).
// Only the thread that runs the executor calls plan().
#pragma once

#include <collie/collie.hpp>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "core/call_fingerprint.hpp"
#include "core/executor.hpp"
#include "core/flight_recorder.hpp"
#include "core/op_desc.hpp"
#include "core/prepared_call.hpp"
#include "core/tuner.hpp"

namespace collie::core {

struct ShareFamily;

class Planner {
 public:
  Planner(int rank, int nranks, std::string name)
      : rank_(rank),
        nranks_(nranks),
        name_(std::move(name)),
        sends_(static_cast<size_t>(nranks), 0),
        recvs_(static_cast<size_t>(nranks), 0) {}

  /// The transports in order of preference, and the one that connected each rank ("self" for this rank).
  void setTransports(std::vector<std::string> preference, std::vector<std::string> byRank);
  /// Which host each rank runs on (host_identity.hpp): the hierarchical schedules follow it, and the tuner's cost
  /// model takes its shape (tuner.hpp, HostShape).
  void setHosts(algorithms::patterns::HostLayout hosts);
  const algorithms::patterns::HostLayout& hosts() const { return hosts_; }
  /// Every planned call is recorded there (when set) as it starts.
  /// The user's calls start: `recorder` sees them from now on, and call numbers start again at 0 (every rank made
  /// the same internal calls before, all matched), so that a mismatch's "call #N" is the recorder's sequence
  /// number in programs without send/receive.
  void setRecorder(FlightRecorder* recorder);
  /// The communicator's tag in every fingerprint (call_fingerprint.hpp; 0 unless it shares its parent's connections).
  void setTag(uint32_t tag) { tag_ = tag; }
  /// The sharing family of this communicator (every communicator has one): each collective call is published as its
  /// last (ShareFamily::lastCall), and, while a child shares, recorded there too (ShareFamily::recordCall).
  void setFamily(ShareFamily* family) { family_ = family; }
  uint32_t tag() const { return tag_; }
  /// The fingerprints of the recent collective calls (planned ones included), for the executor's look at messages
  /// no receive takes (Executor::enableLook). The object lives as long as the planner.
  const CallHistory& history() const { return history_; }
  /// The tuner, to change it (setup only): forgets the memo of the last call's plan.
  Tuner& tuner() {
    memo_.valid = false;
    return tuner_;
  }
  const Tuner& tuner() const { return tuner_; }

  /// The jobs for `ops` (valid until the next call), recording the last one as lastCall().
  const std::vector<Job>& plan(const std::vector<OpDesc>& ops);
  /// The job of the last plan() again, numbered, fingerprinted and recorded as a new call, for a call whose
  /// arguments are `key`'s (the prepared path, prepared_call.hpp); null unless the last plan() was that one call
  /// and its choice still stands.
  const std::vector<Job>* repeat(const CallKey& key);
  /// The fingerprint a Recv `op` from `peer` would expect if planned now (a receive from any source, any_source.hpp).
  transport::Fingerprint recvFingerprint(const OpDesc& op, int peer) const;
  /// What the most recent planned call runs. Any thread.
  CallInfo lastCall() const;
  /// `r` as found by this rank (rankB) with this rank's side replaced by its own call of the number the peer's
  /// message carried, when that was an earlier collective: a stale message names the call that differed.
  transport::MismatchRecord explain(transport::MismatchRecord r) const;

 private:
  /// Adds a collective call's fingerprint to history_ (and to the family's record while a child shares).
  void remember(const transport::Fingerprint& fp);
  const algorithms::Schedule& schedule(algorithms::Algorithm algo, const algorithms::ScheduleKey& key);
  /// The transports of the peers `schedule` touches, as bits of preference_ (0: "self"), cached per schedule.
  uint32_t transportsOf(const algorithms::Schedule& schedule);

  /// The last call's choice, reused while calls repeat (the common case: a training loop's same call), so that a
  /// repeated call asks neither the tuner nor the caches. Forgotten whenever the tuner, the transports or the
  /// schedule cache change.
  struct Memo {
    bool valid = false;
    algorithms::ScheduleKey key;
    size_t bytes = 0;
    TunedPlan plan;
    const algorithms::Schedule* schedule = nullptr;
    uint32_t transports = 0;
  };
  /// What repeat() needs of the last plan() of a single call.
  struct Repeat {
    bool valid = false;
    CallKey key;
    OpDesc op;                    // without work or staging: what the recorder is given
    uint32_t* counter = nullptr;  // the call numbers it takes: collectiveCalls_, or sends_/recvs_ of its peer
    bool collective = false;
  };
  /// What plan() records per call: no strings, so the hot path allocates nothing; lastCall() names them.
  struct Record {
    bool valid = false;
    algorithms::Collective coll = algorithms::Collective::AllReduce;
    algorithms::Algorithm algo = algorithms::Algorithm::Ring;
    uint32_t transports = 0;
    size_t bytes = 0;
    size_t sliceBytes = 0;
    bool operator==(const Record&) const = default;
  };

  const int rank_, nranks_;
  const std::string name_;
  Tuner tuner_;
  FlightRecorder* recorder_ = nullptr;
  std::vector<std::string> preference_;     // transport names, in order of preference
  std::vector<std::string> peerTransport_;  // by rank
  algorithms::patterns::HostLayout hosts_;  // empty: one host
  std::unordered_map<algorithms::ScheduleId, algorithms::Schedule, algorithms::ScheduleIdHash> cache_;
  std::unordered_map<const algorithms::Schedule*, uint32_t> transportCache_;  // follows cache_
  Memo memo_;
  Repeat repeat_;
  uint64_t scheduleGeneration_ = 1;  // changes when the schedule cache is cleared (Job::scheduleGeneration)
  std::vector<Job> jobs_;
  uint32_t collectiveCalls_ = 0;         // collective calls planned so far
  uint32_t tag_ = 0;                     // in every fingerprint
  std::vector<uint32_t> sends_, recvs_;  // by peer: sends to it and receives from it planned so far
  CallHistory history_;                  // fingerprints of the recent collective calls
  ShareFamily* family_ = nullptr;        // setFamily
  mutable std::mutex callMu_;
  Record last_;
};

}  // namespace collie::core
