// AnySourceMatcher (any_source.hpp): probing the peers' connections until one has a send to this rank.
#include "core/any_source.hpp"

#include <sched.h>

#include "base/errors.hpp"
#include "core/call_fingerprint.hpp"

namespace collie::core {

using Clock = std::chrono::steady_clock;

namespace {
/// How often a waiting receive asks its candidates whether a silent peer is dead (as the executor does).
constexpr std::chrono::milliseconds kAliveCheckEvery{1000};

}  // namespace

AnySourceMatcher::AnySourceMatcher(int rank, int nranks, ConnectionOf connectionOf, base::Poller& poller,
                                   const std::atomic<bool>& abortFlag, std::string commName)
    : rank_(rank),
      nranks_(nranks),
      connectionOf_(std::move(connectionOf)),
      poller_(poller),
      abort_(abortFlag),
      name_(std::move(commName)),
      last_(rank),
      closed_(static_cast<size_t>(nranks)),
      ahead_(static_cast<size_t>(nranks)) {}

int AnySourceMatcher::pass(const Call& call) {
  bool candidates = false;
  for (int k = 1; k <= nranks_; ++k) {  // every rank, the one matched last at the end
    const int p = (last_ + k) % nranks_;
    if (p == rank_ || !closed_[static_cast<size_t>(p)].empty()) continue;
    candidates = true;  // connected or not yet
    transport::Connection* c = connectionOf_(p);
    if (!c) continue;
    transport::Arrival next;
    try {
      if (!c->probe(&next)) continue;
    } catch (const transport::MismatchError&) {
      throw;  // the peer found a mismatch with this rank: every rank reports it
    } catch (const Error& e) {
      if (e.code() != ErrorCode::RemoteError) throw;
      closed_[static_cast<size_t>(p)] = e.what();  // it can send nothing more
      continue;
    }
    if (!isSendTo(next.fp, rank_)) {
      const std::optional<transport::Fingerprint> made = call.mine ? call.mine(next.fp) : std::nullopt;
      if (made && contradicts(next.fp, *made)) {
        transport::throwMismatch(
            transport::MismatchRecord{p, rank_, next.fp, *made},
            base::format("in a message from peer %d that a receive from any source passed", p).c_str());
      }
      ahead_[static_cast<size_t>(p)] = next.fp;  // in a later call; its send to us, if any, comes after it
      continue;
    }
    const transport::Fingerprint mine = call.expected(p);
    if (next.fp != mine) {
      transport::throwMismatch(transport::MismatchRecord{p, rank_, next.fp, mine},
                               base::format("by a receive from any source on rank %d", rank_).c_str());
    }
    last_ = p;
    return p;
  }
  if (!candidates) failAllClosed(call);
  return -1;
}

int AnySourceMatcher::match(const Call& call, const ExecConfig& config) {
  COLLIE_USAGE_CHECK(nranks_ > 1, "%s rank %d: %s: there is no other rank to receive from", name_.c_str(), rank_,
                     call.text.c_str());
  struct EndProbes {  // however the match ends, the connections stop waking the poller for unclaimed messages
    AnySourceMatcher& m;
    ~EndProbes() {
      for (int p = 0; p < m.nranks_; ++p)
        if (transport::Connection* c = p == m.rank_ ? nullptr : m.connectionOf_(p)) c->endProbe();
    }
  } guard{*this};
  std::fill(ahead_.begin(), ahead_.end(), transport::Fingerprint{});
  const auto start = Clock::now();
  auto lastAliveCheck = start;
  for (unsigned idlePasses = 0;; ++idlePasses) {
    if (abort_.load(std::memory_order_relaxed))
      COLLIE_FAIL(ErrorCode::InvalidUsage, "%s rank %d: the communicator was aborted", name_.c_str(), rank_);
    const int peer = pass(call);
    if (peer >= 0) return peer;
    if (idlePasses % 16 != 15) {  // spin, reading the clock every 16th pass (as the executor)
      if (config.yieldWhileSpinning) sched_yield();
      continue;
    }
    const auto idle = Clock::now() - start;
    if (idle > config.timeout) failTimeout(call, config);
    if (idle < config.spin) continue;
    if (Clock::now() - lastAliveCheck > kAliveCheckEvery) {
      lastAliveCheck = Clock::now();
      for (int p = 0; p < nranks_; ++p) {
        transport::Connection* c = p == rank_ ? nullptr : connectionOf_(p);
        if (!c || !closed_[static_cast<size_t>(p)].empty()) continue;
        try {
          c->checkAlive();
        } catch (const Error& e) {
          if (e.code() != ErrorCode::RemoteError) throw;
          closed_[static_cast<size_t>(p)] = e.what();
        }
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(config.timeout - idle);
    poller_.wait(std::min<std::chrono::microseconds>(left, std::chrono::milliseconds(100)));
  }
}

void AnySourceMatcher::failTimeout(const Call& call, const ExecConfig& config) const {
  std::string waiting, closed;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    const std::string& why = closed_[static_cast<size_t>(p)];
    if (!why.empty()) {
      closed += base::format("%srank %d", closed.empty() ? "" : ", ", p);
      continue;
    }
    const transport::Fingerprint& ahead = ahead_[static_cast<size_t>(p)];
    std::string state = !connectionOf_(p) ? std::string("not connected yet")
                        : ahead.shape     ? "its next message is from " + callText(ahead, p, rank_)
                                          : call.lastSeenText(p);
    waiting += base::format("%srank %d (%s)", waiting.empty() ? "" : ", ", p, state.c_str());
  }
  COLLIE_FAIL(ErrorCode::Timeout,
              "%s rank %d: no progress for %lld ms in %s while waiting on %s%s%s (no rank sent to this one: a peer "
              "may have died, hung, or called something else)",
              name_.c_str(), rank_, static_cast<long long>(config.timeout.count()), call.text.c_str(),
              waiting.empty() ? "?" : waiting.c_str(), closed.empty() ? "" : "; closed: ", closed.c_str());
}

void AnySourceMatcher::failAllClosed(const Call& call) const {
  std::string closed;
  for (int p = 0; p < nranks_; ++p) {
    const std::string& why = closed_[static_cast<size_t>(p)];
    if (!why.empty()) closed += base::format("%srank %d: %s", closed.empty() ? "" : "; ", p, why.c_str());
  }
  COLLIE_FAIL(ErrorCode::RemoteError,
              "%s rank %d: %s cannot complete: every rank it could come from has closed its connection (%s)",
              name_.c_str(), rank_, call.text.c_str(), closed.c_str());
}

}  // namespace collie::core
