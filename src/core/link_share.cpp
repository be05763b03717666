// Connections shared with children split with shareConnections (see link_share.hpp).
#include "core/link_share.hpp"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "core/call_fingerprint.hpp"

namespace collie::core {
namespace {

/// A child's view of its parent's connection to the same rank: every operation goes to the parent's connection, so
/// closing or poisoning it (the child failed) closes the shared one, as a failure must.
class BorrowedConnection : public transport::Connection {
 public:
  BorrowedConnection(int peer, transport::Connection* shared) : peer_(peer), shared_(shared) {}
  int peer() const override { return peer_; }
  void postSend(transport::Transfer* t) override { shared_->postSend(t); }
  void postRecv(transport::Transfer* t) override { shared_->postRecv(t); }
  bool progress() override { return shared_->progress(); }
  bool busy() const override { return shared_->busy(); }
  bool announcedByPoller() const override { return shared_->announcedByPoller(); }
  void close() override { shared_->close(); }
  void checkAlive() override { shared_->checkAlive(); }
  bool probe(transport::Arrival* next) override { return shared_->probe(next); }
  void endProbe() override { shared_->endProbe(); }
  void poison(const transport::MismatchRecord& why) override { shared_->poison(why); }
  void revealPoison(transport::Clock::time_point until) override { shared_->revealPoison(until); }

 private:
  int peer_;
  transport::Connection* shared_;  // owned by the lender's links, which the child's LinkShare keeps alive
};

/// One of the parent's transports as a sharing child sees it (link_share.hpp).
class LendingTransport : public transport::Transport {
 public:
  LendingTransport(std::shared_ptr<LinkShare> lender, size_t index, std::vector<int> lenderRank)
      : lender_(std::move(lender)), index_(index), lenderRank_(std::move(lenderRank)) {}
  const char* name() const override { return inner().name(); }
  transport::TransportKind kind() const override { return inner().kind(); }
  void listen(transport::PeerInfo&) override {
    COLLIE_FAIL(ErrorCode::InternalError, "a communicator that shares its parent's connections does not listen");
  }
  bool canConnect(const transport::PeerInfo& local, const transport::PeerInfo& peer) const override {
    return inner().canConnect(local, peer);
  }
  std::vector<std::unique_ptr<transport::Connection>> connect(const transport::CommContext&,
                                                              const std::vector<int>& peers) override {
    return lend(peers, false);
  }
  bool dialsAnyTime() const override { return inner().dialsAnyTime(); }
  std::vector<std::unique_ptr<transport::Connection>> dial(const transport::CommContext&,
                                                           const std::vector<int>& peers) override {
    return lend(peers, true);
  }
  std::unique_ptr<transport::Transport> shareListener() const override { return inner().shareListener(); }
  // A waiting call of the child shows and asks through the root's listeners: one member of a family runs at a time,
  // and the tags in the fingerprints tell whose calls an answer names.
  void showWaitingCalls(const std::vector<transport::Fingerprint>& calls) override { inner().showWaitingCalls(calls); }
  void showLastCall(std::shared_ptr<const transport::LastCall> last) override { inner().showLastCall(std::move(last)); }
  std::optional<transport::ToldCalls> askWaitingCalls(const transport::CommContext&, int peer) override {
    return inner().askWaitingCalls(lender_->links.ctx, lenderRank_[static_cast<size_t>(peer)]);
  }

 private:
  transport::Transport& inner() const { return *lender_->links.transports[index_]; }
  /// Connects the parent's ranks of `peers` where the parent has no connection yet (the parent's peers answer from
  /// their accept loops, or connect collectively where the child's do: the child's schedule names the same pairs),
  /// then borrows them.
  std::vector<std::unique_ptr<transport::Connection>> lend(const std::vector<int>& peers, bool dial) {
    std::vector<int> theirs;
    for (int p : peers) theirs.push_back(lenderRank_[static_cast<size_t>(p)]);
    connectPeers(lender_->links, theirs, dial);
    std::vector<std::unique_ptr<transport::Connection>> out;
    for (size_t i = 0; i < peers.size(); ++i) {
      transport::Connection* shared = lender_->links.conns[static_cast<size_t>(theirs[i])].get();
      COLLIE_INTERNAL_CHECK(shared, "%s: no connection to lend to rank %d", lender_->links.ctx.name.c_str(), theirs[i]);
      out.push_back(std::make_unique<BorrowedConnection>(peers[i], shared));
    }
    return out;
  }

  std::shared_ptr<LinkShare> lender_;
  size_t index_;
  std::vector<int> lenderRank_;
};

}  // namespace

void FamilyGate::lock() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !held_; });
  held_ = true;
}

bool FamilyGate::try_lock() {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_) return false;
  held_ = true;
  return true;
}

bool FamilyGate::try_lock_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !held_; })) return false;
  held_ = true;
  return true;
}

void FamilyGate::unlock() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
  }
  cv_.notify_one();
}

std::shared_ptr<void> beginTurn(const std::shared_ptr<ShareFamily>& family, const void* member,
                                std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(family->turnMu);
  const bool mine =
      family->turnCv.wait_for(lock, timeout, [&] { return family->turnCalls == 0 || family->turnOwner == member; });
  if (!mine) return nullptr;
  family->turnOwner = member;
  ++family->turnCalls;
  struct Turn {
    explicit Turn(std::shared_ptr<ShareFamily> f) : family(std::move(f)) {}
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    std::shared_ptr<ShareFamily> family;
    ~Turn() {
      {
        std::lock_guard<std::mutex> lock(family->turnMu);
        if (--family->turnCalls == 0) family->turnOwner = nullptr;
      }
      family->turnCv.notify_all();
    }
  };
  return std::make_shared<Turn>(family);
}

void ShareFamily::recordFailure(ErrorCode code, const std::string& message) {
  std::lock_guard<std::mutex> lock(failMu);
  if (failed.load()) return;
  failCode = code;
  failure = message;
  failed.store(true);
}

std::pair<ErrorCode, std::string> ShareFamily::failureOf() {
  std::lock_guard<std::mutex> lock(failMu);
  return {failCode, failure};
}

void ShareFamily::holdTag(uint32_t tag) {
  std::lock_guard<std::mutex> lock(tagsMu_);
  tags_.push_back(tag);
}

void ShareFamily::releaseTag(uint32_t tag) {
  {
    std::lock_guard<std::mutex> lock(tagsMu_);
    auto it = std::find(tags_.begin(), tags_.end(), tag);
    if (it != tags_.end()) tags_.erase(it);
  }
  std::lock_guard<std::mutex> lock(callsMu_);
  std::erase_if(calls_, [tag](const auto& c) { return c.first == tag; });
}

void ShareFamily::recordCall(uint32_t tag, const transport::Fingerprint& fp) {
  std::lock_guard<std::mutex> lock(callsMu_);
  for (auto& [t, history] : calls_) {
    if (t == tag) {
      history.add(fp);
      return;
    }
  }
  calls_.emplace_back(tag, CallHistory{}).second.add(fp);
}

std::optional<transport::Fingerprint> ShareFamily::recalledCall(uint32_t tag, uint32_t call) {
  std::lock_guard<std::mutex> lock(callsMu_);
  for (const auto& [t, history] : calls_)
    if (t == tag)
      if (const transport::Fingerprint* fp = history.find(call)) return *fp;
  return std::nullopt;
}

uint32_t ShareFamily::takenTagCandidates(uint32_t parentTag, int epoch, int color) {
  std::lock_guard<std::mutex> lock(tagsMu_);
  uint32_t taken = 0;
  for (int i = 0; i < kTagCandidates; ++i) {
    const uint32_t tag = sharingTagCandidate(parentTag, epoch, color, i);
    if (std::find(tags_.begin(), tags_.end(), tag) != tags_.end()) taken |= 1u << i;
  }
  return taken;
}

uint32_t sharingTagCandidate(uint32_t parentTag, int epoch, int color, int candidate) {
  uint64_t h = (uint64_t{parentTag} << 40) ^ (static_cast<uint64_t>(static_cast<uint32_t>(epoch)) << 20) ^
               static_cast<uint32_t>(color);
  h += static_cast<uint64_t>(candidate) * 0x9e3779b97f4a7c15ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  uint32_t tag = 1 + static_cast<uint32_t>(h % kMaxCommTag);
  if (tag == parentTag) tag = tag % kMaxCommTag + 1;
  return tag;
}

LinkShare::~LinkShare() {
  if (lender) return;  // borrowed: the parent's links close them
  for (auto& c : links.conns)
    if (c) c->close();
}

std::vector<std::unique_ptr<transport::Transport>> lendingTransports(const std::shared_ptr<LinkShare>& lender,
                                                                     const std::vector<int>& lenderRank) {
  std::vector<std::unique_ptr<transport::Transport>> out;
  for (size_t i = 0; i < lender->links.transports.size(); ++i)
    out.push_back(std::make_unique<LendingTransport>(lender, i, lenderRank));
  return out;
}

}  // namespace collie::core
