// What a run that waits does besides waiting (Executor, executor.hpp): the look at its idle connections once a
// second, the questions to the peers it waits on, and the timeout's message, which says what it learned.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "core/call_fingerprint.hpp"
#include "core/executor.hpp"

namespace collie::core {

using Clock = std::chrono::steady_clock;

// Names the call this rank is in and, for each peer it waits on, the last call that peer was seen in (the
// fingerprint of the last message received from it), so that ranks stuck in different calls can be told apart.
void Executor::failTimeout() {
  const StepState& cur = steps_[std::min(firstLive_, steps_.size() - 1)];
  const int curPeer = cur.step->recvPeer >= 0 ? cur.step->recvPeer : cur.step->sendPeer;
  const Job& job = jobs_[cur.job];
  const std::string in = callText(cur.receives() ? job.recvFp : job.sendFp, rank_, curPeer);
  std::string waiting;
  for (int p : activePeers_) {
    if (p == rank_ || !conns_[static_cast<size_t>(p)]->busy()) continue;
    waiting +=
        base::format("%srank %d (%s%s)", waiting.empty() ? "" : ", ", p, lastSeenText(p).c_str(), toldText(p).c_str());
  }
  COLLIE_FAIL(ErrorCode::Timeout,
              "%s rank %d: no progress for %lld ms in %s while waiting on %s (a peer may have died, hung, or "
              "called a different collective)",
              name_.c_str(), rank_, static_cast<long long>(config_.timeout.count()), in.c_str(),
              waiting.empty() ? "?" : waiting.c_str());
}

std::string Executor::lastSeenText(int peer) const {
  const auto p = static_cast<size_t>(peer);
  if (lastSeen_[p].shape) return "last seen in " + callText(lastSeen_[p], peer, rank_);
  if (p < seenInInit_.size() && seenInInit_[p]) return "last seen in init, before this communicator's first call";
  return "nothing received from it yet";
}

void Executor::beginUserCalls() {
  seenInInit_.assign(lastSeen_.size(), 0);
  for (size_t p = 0; p < lastSeen_.size(); ++p) {
    if (lastSeen_[p].shape == 0) continue;
    seenInInit_[p] = 1;
    lastSeen_[p] = {};
  }
}

// Some mismatches send only where no receive waits: in a Reduce whose ranks name different roots, or an AllReduce
// against the others' Reduce, a rank may wait on a peer that waits on a third, while the message that shows the
// difference sits unread at a rank that never receives from its sender in this call. So a run waiting for a while
// looks, about once a second, at the head of every connection it has nothing posted on (Connection::probe, which
// consumes nothing): a collective message of this communicator numbered like a call this rank made, with another
// fingerprint, is a mismatch found now rather than at the timeout (the communicator then fails and poisons its
// links, so the others learn too). A poisoned link says the peer found one. A link that ended or cannot look ahead
// is left to the call that needs it: a peer may rightly have gone after its last call. Connections that peers
// dialled and this rank answered, but that no call of its own has needed yet, are taken first (the communicator's
// takeAnswered): with connections on first use the telling message is often in one of those. Where no message was
// sent at all (every rank of a cycle waits to receive), the waiting ranks compare their calls outside the data
// stream (compareWaitingCalls).
void Executor::lookAtIdleConnections() {
  if (!history_) return;
  if (look_.takeAnswered) look_.takeAnswered();  // a peer that dialled this rank may have sent it the message
  for (size_t p = 0; p < conns_.size(); ++p) {
    transport::Connection* c = conns_[p];
    if (!c || static_cast<int>(p) == rank_ || c->busy()) continue;
    transport::Arrival next;
    bool arrived = false;
    try {
      arrived = c->probe(&next);
    } catch (const transport::MismatchError&) {
      c->endProbe();
      throw;
    } catch (const Error&) {
      c->endProbe();
      continue;
    }
    c->endProbe();
    if (!arrived) continue;
    const std::optional<transport::Fingerprint> mine = mineFor(next.fp);
    if (mine && contradicts(next.fp, *mine)) {
      transport::throwMismatch(transport::MismatchRecord{static_cast<int32_t>(p), rank_, next.fp, *mine},
                               base::format("in a message from peer %zu that no receive took", p).c_str());
    }
  }
  compareWaitingCalls();
}

// Ranks that only wait to receive exchange no message that could show their calls differ (a Reduce where one rank
// names itself root: every rank's part starts with a receive). So a waiting run shows the collective calls it still
// waits in to any peer that asks (through the peer's listener, not the data stream: Transport::askWaitingCalls), and
// asks one of the peers it waits on, in turn, which calls it waits in (and which collective call it made last): one in
// the same call with another fingerprint is the mismatch. A peer that waits in nothing (it is not waiting, or not for
// a second yet) and whose last call this rank made alike (or has not made yet) says nothing; a peer whose
// communicator failed on mismatched calls says which, as its refused dial would. One question per look: a peer that
// does not answer holds this run kAskWait (250 ms) at most per second. A peer is asked again after 1, 2, 4, then
// every kAskGapMax (8) looks of the same stall (a look comes about once a second; with several peers waited on, each
// has its turn in rotation): a rank that is late in earnest, which every rank of a direct algorithm waits on, is
// asked once every 8 s or so by each, not once a second, and a mismatched call a late peer enters is found within
// about 8 s of its showing it, or at once where that peer waits on this rank (it asks at its own first look). The
// run moving starts the asking afresh.
void Executor::compareWaitingCalls() {
  if (!look_.showWaiting || !look_.askWaiting) return;
  std::vector<transport::Fingerprint> calls;
  for (size_t j = 0; j < jobs_.size(); ++j)
    if (!jobDone_[j] && isCollectiveFingerprint(jobs_[j].sendFp)) calls.push_back(jobs_[j].sendFp);
  look_.showWaiting(calls);  // again at every look: a group's calls finish one by one
  showingWaiting_ = true;
  std::vector<int> waitedOn;
  for (int p : activePeers_) {
    const transport::Connection* c = conns_[static_cast<size_t>(p)];
    if (p != rank_ && c && c->busy()) waitedOn.push_back(p);
  }
  if (waitedOn.empty()) return;
  if (asking_.size() != static_cast<size_t>(nranks_)) asking_.assign(static_cast<size_t>(nranks_), PeerAsked{});
  ++looks_;
  int p = -1;
  for (size_t k = 0; k < waitedOn.size() && p < 0; ++k) {
    const int q = waitedOn[(askNext_ + k) % waitedOn.size()];
    if (asking_[static_cast<size_t>(q)].nextLook > looks_) continue;
    p = q;
    askNext_ += k + 1;
  }
  if (p < 0) return;  // every waited-on peer was asked lately
  PeerAsked& a = asking_[static_cast<size_t>(p)];
  a.nextLook = looks_ + askGapAfter(a.asked);
  if (a.asked < 255) ++a.asked;
  const std::optional<transport::ToldCalls> answer = look_.askWaiting(p);
  if (!answer) {
    a.unansweredAt = Clock::now();  // what it said before, if anything, still stands
    COLLIE_TRACE(base::kLogColl, "%s rank %d: rank %d, which this run waits on, did not answer", name_.c_str(), rank_,
                 p);
    return;
  }
  const std::vector<transport::Fingerprint>& told = answer->waiting;
  a.answeredAt = Clock::now();
  a.count = static_cast<uint8_t>(told.size());
  a.first = told.empty() ? transport::Fingerprint{} : told[0];
  COLLIE_TRACE(base::kLogColl, "%s rank %d: rank %d, which this run waits on, waits in %zu call(s)", name_.c_str(),
               rank_, p, told.size());
  for (const transport::Fingerprint& theirs : told) {
    const std::optional<transport::Fingerprint> mine = mineFor(theirs);
    if (mine && contradicts(theirs, *mine)) {
      transport::throwMismatch(transport::MismatchRecord{p, rank_, theirs, *mine},
                               base::format("told by peer %d, which waits in that call", p).c_str());
    }
  }
  // A peer past a call that moved nothing on its side (0 elements where this rank has more) may wait in no call of
  // this communicator: the last call it made is the one to compare.
  if (const std::optional<transport::Fingerprint>& last = answer->last) {
    const std::optional<transport::Fingerprint> mine = mineFor(*last);
    if (mine && contradicts(*last, *mine)) {
      transport::throwMismatch(transport::MismatchRecord{p, rank_, *last, *mine},
                               base::format("told by peer %d, whose last call that was", p).c_str());
    }
  }
}

std::optional<transport::Fingerprint> Executor::mineFor(const transport::Fingerprint& theirs) const {
  if (!history_) return std::nullopt;
  const transport::Fingerprint* own = history_->find(theirs.call);
  if (own && communicatorTag(*own) == communicatorTag(theirs)) return *own;
  if (look_.recall && isCollectiveFingerprint(theirs)) return look_.recall(theirs);
  return std::nullopt;
}

void Executor::stopShowingWaiting() {
  if (!showingWaiting_) return;
  showingWaiting_ = false;
  look_.showWaiting({});
  restartAsking();
}

void Executor::restartAsking() {
  looks_ = 0;
  std::fill(asking_.begin(), asking_.end(), PeerAsked{});
}

std::string Executor::toldText(int peer) const {
  const auto p = static_cast<size_t>(peer);
  if (p >= asking_.size() || asking_[p].asked == 0) return "";
  const PeerAsked& t = asking_[p];
  const auto ago = [](Clock::time_point at) { return std::chrono::duration<double>(Clock::now() - at).count(); };
  if (t.answeredAt == Clock::time_point{})
    return base::format("; asked %.0f s ago which calls it waits in, it did not answer", ago(t.unansweredAt));
  std::string said = t.count == 0
                         ? base::format(
                               "; asked %.0f s ago, it showed no call of this communicator that it had waited in "
                               "for a second: it may be computing, in another communicator's call, or have made "
                               "one call fewer than this rank",
                               ago(t.answeredAt))
                         : base::format("; asked %.0f s ago, it was waiting itself in %s%s", ago(t.answeredAt),
                                        callText(t.first, peer, rank_).c_str(),
                                        t.count > 1 ? base::format(" and %u more", t.count - 1u).c_str() : "");
  if (t.unansweredAt > t.answeredAt)
    said += base::format(" (asked again %.0f s ago, it did not answer)", ago(t.unansweredAt));
  return said;
}

}  // namespace collie::core
