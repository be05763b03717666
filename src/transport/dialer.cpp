// The dial rule (see dialer.hpp).
#include "transport/dialer.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "base/errors.hpp"
#include "base/fd_limits.hpp"
#include "base/log.hpp"
#include "base/socket.hpp"

namespace collie::transport::handshake {
namespace {

/// How long a dial closed before any answer waits before it is tried again.
constexpr std::chrono::milliseconds kRedialPause{20};
// How long a rank whose dial was turned away as a duplicate waits for the peer's own dial before it dials again: the
// peer gives its dial up when its connect fails before it opened it (then it refuses, and this rank hears so).
constexpr std::chrono::milliseconds kRedialRefused{300};

}  // namespace

Dialer::Dialer(const char* transport, TransportKind kind, int channels, DialProtocol& protocol, Wire& wire)
    : transport_(transport), kind_(kind), channels_(channels), protocol_(protocol), wire_(wire) {}

Dialer::~Dialer() {
  if (listener_) listener_->remove(&desk_);
}

void Dialer::serve(Listener& listener, const CommContext& ctx) {
  if (listener_) return;
  deskCtx_ = ctx;
  deskCtx_.peers.clear();  // the answering side needs no table
  deskCtx_.abort = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pairs_.resize(static_cast<size_t>(std::max(ctx.nranks, 0)));
  }
  desk_.kind = kind_;
  desk_.rank = ctx.rank;
  desk_.nranks = ctx.nranks;
  desk_.channels = channels_;
  std::memcpy(desk_.secret, ctx.secret, sizeof(desk_.secret));
  desk_.take = [this](Link& link) { take(link); };
  listener_ = &listener;
  listener.add(&desk_);
}

void Dialer::answerWith(Link& link, uint32_t type, const void* tail, size_t tailBytes) const {
  std::vector<uint8_t> msg(wire_.messageBytes(), 0);
  const Header h = makeHeader(kind_, type, desk_.rank, link.peer, link.channel, desk_.secret);
  std::memcpy(msg.data(), &h, sizeof(h));
  // A fresh socket's buffer takes both at once; a write that does not go whole leaves the dialler its deadline's
  // error. Two writes: on shm's SOCK_SEQPACKET socket each is a packet of its own, read as one.
  const ssize_t sent = ::send(link.fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (tailBytes == 0 || sent != static_cast<ssize_t>(msg.size())) return;
  [[maybe_unused]] ssize_t n = ::send(link.fd.get(), tail, tailBytes, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Dialer::refuse(Link& link, uint32_t type, const MismatchRecord& why) const {
  answerWith(link, type, &why, type == kRefusedMismatch ? sizeof(why) : 0);
}

void Dialer::failRefusedMismatch(Handshake& hs, Link& link, const char* how) const {
  MismatchRecord why;
  bool whole = true;
  try {  // written right after the refusal: waited for briefly, not to the call's deadline
    base::recvAll(link.fd.get(), &why, sizeof(why), std::min(hs.deadline(), Clock::now() + kHelloWait),
                  base::format("rank %d", link.peer));
  } catch (const Error&) {
    whole = false;
  }
  const int n = hs.context().nranks;
  const bool valid = whole && why.rankA >= 0 && why.rankA < n && why.rankB >= 0 && why.rankB < n;
  COLLIE_ENFORCE(valid, ErrorCode::RemoteError,
                 "%s connect of rank %d%s: rank %d turned the connection down: its communicator failed on mismatched "
                 "calls (which, it did not say whole: see its log)",
                 transport_, hs.rank(), hs.where().c_str(), link.peer);
  throwMismatch(why, base::format("from rank %d, %s over %s", link.peer, how, transport_).c_str());
}

// On the accept loop's thread (its lock held).
void Dialer::take(Link& link) {
  if (link.header().type == kAskWaiting) {  // a question, not a dial
    tellWaiting(link);
    return;
  }
  if (link.header().type == kAskCard) {
    tellCard(link);
    return;
  }
  const int p = link.peer, me = desk_.rank;
  const auto channel = static_cast<size_t>(link.channel);
  uint32_t refusal = 0;
  MismatchRecord why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pair& pair = pairs_[static_cast<size_t>(p)];
    if (refusing_) {
      refusal = refusalWhy_ ? kRefusedMismatch : kRefusedFailed;
      if (refusalWhy_) why = *refusalWhy_;
    } else if (pair.state == State::Idle || (pair.state == State::Dialing && me > p)) {
      pair.state = State::Answering;  // hi gives its own dial up for lo's
      pair.links.clear();
      pair.links.resize(static_cast<size_t>(channels_));
      pair.got = 0;
    } else if (pair.state != State::Answering || pair.links[channel].fd.get() >= 0) {
      refusal = kRefusedDuplicate;  // lo dialling hi, a pair already connected, or a channel twice
    }
    if (refusal == 0) ++answering_;
  }
  if (refusal != 0) {
    COLLIE_TRACE(base::kLogNet, "%s: rank %d turns the dial of rank %d (channel %zu) away (%s)", transport_, me, p,
                 channel, refusal == kRefusedDuplicate ? "duplicate" : "failed here");
    refuse(link, refusal, why);
    return;
  }
  std::string error;
  ErrorCode code = ErrorCode::Success;
  try {
    if (!link.failure.empty()) throw Error(link.failureCode, link.failure);  // its hello came, its descriptors not
    Handshake hs(transport_, kind_, deskCtx_, {}, channels_, wire_);
    protocol_.answer(hs, link);
  } catch (const Error& e) {
    error = e.what();
    code = e.code();
  } catch (const std::exception& e) {
    error = e.what();
    code = ErrorCode::InternalError;
  }
  if (!error.empty()) {
    COLLIE_WARN(base::kLogNet, "%s: rank %d could not answer the dial of rank %d: %s", transport_, me, p,
                error.c_str());
    refuse(link, kRefusedFailed);
  }
  std::lock_guard<std::mutex> lock(mu_);
  Pair& pair = pairs_[static_cast<size_t>(p)];
  // A refuseAll() that began meanwhile waits for this answer: the dialler counts itself connected, so the link
  // must reach the failing communicator to be poisoned or closed like its others, not just dropped.
  if (--answering_ == 0) answered_.notify_all();
  pair.links[channel] = std::move(link);
  if (!error.empty() && pair.error.empty()) {
    pair.error = error;
    pair.code = code;
  }
  if (++pair.got == channels_ || !error.empty()) {
    pair.state = State::Answered;
    answeredEarly_ += pair.asked ? 0 : 1;
    answered_.notify_all();
  }
}

std::vector<std::unique_ptr<Connection>> Dialer::refuseAll(const CommContext& ctx, const MismatchRecord* why) {
  std::map<int, std::vector<Link>> answered;
  {
    std::unique_lock<std::mutex> lock(mu_);
    refusing_ = true;
    if (why && !refusalWhy_) refusalWhy_ = *why;
    answered_.wait(lock, [this] { return answering_ == 0; });  // answer() does not wait on the dialler
    for (size_t p = 0; p < pairs_.size(); ++p) {
      Pair& pair = pairs_[p];
      if (pair.state == State::Answered && pair.error.empty()) answered[static_cast<int>(p)] = std::move(pair.links);
      if (pair.state == State::Answering || pair.state == State::Answered) {
        pair.links.clear();  // closes them
        pair.state = State::Taken;
      }
    }
  }
  // Each is made only to be poisoned or closed by a failing communicator: a last message from its dialler (shm's Ack)
  // is waited for kHelloWait at most, not the call's timeout (a dialler may still be busy opening other peers).
  CommContext quick = ctx;
  if (quick.timeout.count() <= 0 || quick.timeout > kHelloWait)
    quick.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kHelloWait);
  std::vector<std::unique_ptr<Connection>> out;
  for (auto& [p, links] : answered) {
    try {
      Handshake hs(transport_, kind_, quick, {p}, channels_, wire_);
      out.push_back(protocol_.finish(hs, p, links, false));
    } catch (const std::exception& e) {
      COLLIE_TRACE(base::kLogNet, "%s: rank %d closes the connection it answered to rank %d: %s", transport_, ctx.rank,
                   p, e.what());
    }
  }
  return out;
}

void Dialer::release(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  COLLIE_INTERNAL_CHECK(peer >= 0 && static_cast<size_t>(peer) < pairs_.size(), "%s: release of rank %d of %zu",
                        transport_, peer, pairs_.size());
  Pair& pair = pairs_[static_cast<size_t>(peer)];
  COLLIE_INTERNAL_CHECK(pair.state == State::Taken, "%s: rank %d releases rank %d, which it is not connected to",
                        transport_, desk_.rank, peer);
  pair = Pair{};
}

uint64_t Dialer::answeredEarly() const {
  std::lock_guard<std::mutex> lock(mu_);
  return answeredEarly_;
}

std::vector<int> Dialer::answeredPeers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (size_t p = 0; p < pairs_.size(); ++p)
    if (pairs_[p].state == State::Answered && pairs_[p].error.empty()) out.push_back(static_cast<int>(p));
  return out;
}

void Dialer::open(Handshake& hs, Dial& d) {
  d.link.clearMessage();
  d.link.done = false;
  d.link.fd = protocol_.dialSocket(hs, d.link.peer, d.link.channel);
  try {
    protocol_.sendHello(hs, d.link);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::RemoteError) throw;
    // Closed before the hello went out (its listener evicted it, short of descriptors or room): as a dial closed
    // before any answer, it is tried again soon.
    COLLIE_TRACE(base::kLogNet, "%s: rank %d dials rank %d again (closed before its hello: %s)", transport_, hs.rank(),
                 d.link.peer, e.what());
    d.link.fd.reset();
    d.retryAt = Clock::now() + kRedialPause;
  }
}

std::vector<int> Dialer::awaitAnswers(Handshake& hs, std::map<int, std::vector<Dial>>& dials) {
  const int me = hs.rank();
  std::vector<pollfd> pfds;
  std::vector<Dial*> open;
  for (;;) {
    pfds.clear();
    open.clear();
    std::vector<int> missing;
    Clock::time_point wakeAt = hs.deadline();
    const auto now = Clock::now();
    for (auto& [p, list] : dials) {
      bool waiting = false;
      for (Dial& d : list) {
        if (d.link.done) continue;
        waiting = true;
        if (d.link.fd.get() < 0 && d.retryAt <= now && now < hs.deadline()) this->open(hs, d);
        if (d.link.fd.get() < 0) {  // waiting to dial again
          wakeAt = std::min(wakeAt, d.retryAt);
          continue;
        }
        pfds.push_back(pollfd{d.link.fd.get(), POLLIN, 0});
        open.push_back(&d);
      }
      if (waiting) missing.push_back(p);
    }
    if (missing.empty()) break;
    if (now >= hs.deadline()) hs.failTimeout(missing, "answer");
    if (hs.pollWaiting(pfds, missing, wakeAt) == 0) continue;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!pfds[k].revents) continue;
      Dial& d = *open[k];
      Link& l = d.link;
      while (!l.done) {
        const int state = wire_.read(l);
        if (state == 0) break;
        if (state < 0 && !d.answered) {  // closed unanswered: no desk took it there (yet); dial again soon
          COLLIE_TRACE(base::kLogNet, "%s: rank %d dials rank %d again (closed before any answer)", transport_, me,
                       l.peer);
          l.fd.reset();
          d.retryAt = Clock::now() + kRedialPause;
          break;
        }
        COLLIE_ENFORCE(state > 0, ErrorCode::RemoteError,
                       "%s connect of rank %d%s: rank %d at %s closed the connection during the handshake (it may "
                       "have failed)",
                       transport_, me, hs.where().c_str(), l.peer, l.from.c_str());
        const Header& h = l.header();
        COLLIE_ENFORCE(hs.authentic(h) && h.fromRank == l.peer && h.channel == l.channel, ErrorCode::InternalError,
                       "%s connect of rank %d%s: %s (expected rank %d) answered the handshake with a wrong magic, "
                       "secret or rank",
                       transport_, me, hs.where().c_str(), l.from.c_str(), l.peer);
        if (h.type == kRefusedMismatch) failRefusedMismatch(hs, l, "turning this rank's dial down");
        COLLIE_ENFORCE(h.type != kRefusedFailed, ErrorCode::RemoteError,
                       "%s connect of rank %d%s: rank %d turned the connection down: its communicator has failed "
                       "(or it could not answer: see its log)",
                       transport_, me, hs.where().c_str(), l.peer);
        d.answered = true;
        if (h.type == kRefusedDuplicate) {
          d.refused = true;
          l.done = true;
        } else {
          protocol_.onAnswer(hs, l);
        }
        l.clearMessage();
      }
    }
  }
  std::vector<int> refused;
  for (auto& [p, list] : dials) {
    const auto n = std::count_if(list.begin(), list.end(), [](const Dial& d) { return d.refused; });
    // Some links turned away as duplicates and others answered: the peer (the lower rank) gave up its own dial of
    // this rank meanwhile, which it does only when its connect failed (its communicator then fails).
    COLLIE_ENFORCE(n == 0 || n == static_cast<long>(list.size()), ErrorCode::RemoteError,
                   "%s connect of rank %d%s: rank %d turned %ld of the %zu links of one dial away and answered the "
                   "others: it gave up its dial of this rank (its connect failed: it may have failed)",
                   transport_, me, hs.where().c_str(), p, static_cast<long>(n), list.size());
    if (n > 0) refused.push_back(p);
  }
  return refused;
}

std::vector<int> Dialer::awaitDials(Handshake& hs, const std::vector<int>& peers,
                                    std::optional<Clock::time_point> until) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::vector<int> missing, unheard;  // unheard: no dial of theirs is being answered here yet
    for (int p : peers) {
      const State state = pairs_[static_cast<size_t>(p)].state;
      if (state != State::Answered) missing.push_back(p);
      if (state != State::Answered && state != State::Answering) unheard.push_back(p);
    }
    if (missing.empty()) return {};
    if (until && Clock::now() >= *until) return unheard;
    lock.unlock();
    if (Clock::now() >= hs.deadline()) hs.failTimeout(missing, "connect");
    hs.checkWaiting(unheard);  // a peer being answered may have connected, used the pair and exited meanwhile
    int err = 0;               // a peer's dial may wait in the listener's backlog because accept() finds no descriptor
    if (listener_ && listener_->acceptShortage(&err) >= base::FdShortageBackoff::kGrace)
      COLLIE_FAIL(ErrorCode::SystemError, "accept failed: %s", base::fdShortageMessage(err).c_str());
    lock.lock();
    answered_.wait_until(lock, std::min({hs.deadline(), Clock::now() + kLivenessEvery, until.value_or(hs.deadline())}));
  }
}

std::vector<std::unique_ptr<Connection>> Dialer::connect(Listener& listener, const CommContext& ctx,
                                                         const std::vector<int>& peers, bool dialAll) {
  const auto started = Clock::now();
  try {
    return connectPeers(listener, ctx, peers, dialAll);
  } catch (const Error& e) {
    // A peer that went away or stayed silent is often the consequence of what failed here first: this rank could
    // not answer one of its peers' dials, or this process dropped dials, for want of descriptors. The cause first.
    if (e.code() != ErrorCode::RemoteError && e.code() != ErrorCode::Timeout) throw;
    std::string local = localFailure();
    int err = 0;
    if (local.empty() && base::lastFdShortage(&err) >= started)
      local = base::format("%s connect of rank %d: this process ran out of descriptors meanwhile (%s)", transport_,
                           ctx.rank, base::fdShortageMessage(err).c_str());
    if (local.empty()) throw;
    throw Error(ErrorCode::SystemError, local + "; then: " + e.what());
  }
}

std::string Dialer::localFailure() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t p = 0; p < pairs_.size(); ++p) {
    const Pair& pair = pairs_[p];
    if (!pair.error.empty() && pair.code == ErrorCode::SystemError)
      return base::format("%s: rank %d could not answer the dial of rank %zu: %s", transport_, desk_.rank, p,
                          pair.error.c_str());
  }
  return "";
}

std::vector<std::unique_ptr<Connection>> Dialer::connectPeers(Listener& listener, const CommContext& ctx,
                                                              const std::vector<int>& peers, bool dialAll) {
  serve(listener, ctx);
  Handshake hs(transport_, kind_, ctx, peers, channels_, wire_);
  const int me = ctx.rank;
  std::map<int, std::vector<Dial>> dials;
  std::vector<int> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int p : peers) {
      if (p == me) continue;
      Pair& pair = pairs_[static_cast<size_t>(p)];
      pair.asked = true;
      COLLIE_INTERNAL_CHECK(pair.state != State::Dialing && pair.state != State::Taken,
                            "%s connect of rank %d%s: rank %d is connected or being connected already", transport_, me,
                            hs.where().c_str(), p);
      if (pair.state == State::Idle && (dialAll || p < me)) {
        pair.state = State::Dialing;
        dials[p].resize(static_cast<size_t>(channels_));
      } else {
        waiting.push_back(p);
      }
    }
  }
  // Whatever fails from here, dials not finished leave their pairs as they were.
  struct Undo {
    Dialer& self;
    std::map<int, std::vector<Dial>>& dials;
    ~Undo() {
      std::lock_guard<std::mutex> lock(self.mu_);
      for (auto& [p, list] : dials)
        if (self.pairs_[static_cast<size_t>(p)].state == State::Dialing)
          self.pairs_[static_cast<size_t>(p)].state = State::Idle;
    }
  } undo{*this, dials};
  for (auto& [p, list] : dials) {
    for (int c = 0; c < channels_; ++c) {
      Dial& d = list[static_cast<size_t>(c)];
      d.link.peer = p;
      d.link.channel = c;
      open(hs, d);
    }
  }
  std::map<int, std::unique_ptr<Connection>> made;
  for (;;) {
    const std::vector<int> refused = awaitAnswers(hs, dials);
    takeAnswered(hs, dials, refused, made);
    if (refused.empty()) break;
    // The peer's own dial is on its way (dialer.hpp), unless its connect failed before it opened it: then it went
    // back to Idle and is failing. A peer not heard of within kRedialRefused is dialled again: it turns that dial
    // away again (still dialling), answers it (the pair connects; its failing communicator then closes or poisons
    // it), or refuses it (failed: this rank hears why now, not at its timeout).
    for (int p : refused) protocol_.forget(p);
    const std::vector<int> unheard = awaitDials(hs, refused, Clock::now() + kRedialRefused);
    for (int p : refused) {
      if (std::find(unheard.begin(), unheard.end(), p) == unheard.end()) {
        waiting.push_back(p);  // its dial is being answered here
        dials.erase(p);
        continue;
      }
      std::vector<Dial>& list = dials[p];
      list.clear();
      list.resize(static_cast<size_t>(channels_));
      for (int c = 0; c < channels_; ++c) {
        Dial& d = list[static_cast<size_t>(c)];
        d.link.peer = p;
        d.link.channel = c;
        open(hs, d);
      }
    }
    if (unheard.empty()) break;
  }
  awaitDials(hs, waiting);
  for (int p : waiting) {
    std::vector<Link> links;
    std::string error;
    ErrorCode code;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Pair& pair = pairs_[static_cast<size_t>(p)];
      pair.state = State::Taken;
      links = std::move(pair.links);
      error = pair.error;
      code = pair.code;
    }
    if (!error.empty()) throw Error(code, error);
    made[p] = protocol_.finish(hs, p, links, false);
  }
  std::vector<std::unique_ptr<Connection>> out;
  out.reserve(peers.size());
  for (int p : peers) out.push_back(p == me ? makeSelfConnection(p) : std::move(made[p]));
  return out;
}

void Dialer::takeAnswered(Handshake& hs, std::map<int, std::vector<Dial>>& dials, const std::vector<int>& refused,
                          std::map<int, std::unique_ptr<Connection>>& made) {
  const int me = hs.rank();
  for (auto it = dials.begin(); it != dials.end();) {
    const int p = it->first;
    if (std::find(refused.begin(), refused.end(), p) != refused.end()) {
      ++it;
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      Pair& pair = pairs_[static_cast<size_t>(p)];
      if (pair.state != State::Dialing) {
        // This rank (the higher) gave its dial up for the peer's, and the peer then answered this one: it abandoned
        // its own dial, which it does only when its connect failed (then its communicator fails, and answering its
        // dial usually failed too: that error says why).
        if (!pair.error.empty()) throw Error(pair.code, pair.error);
        COLLIE_FAIL(ErrorCode::RemoteError,
                    "%s connect of rank %d%s: rank %d gave up its dial of this rank (its connect failed: it may have "
                    "failed)",
                    transport_, me, hs.where().c_str(), p);
      }
      pair.state = State::Taken;
    }
    std::vector<Link> links;
    for (Dial& d : it->second) links.push_back(std::move(d.link));
    it = dials.erase(it);  // Taken: Undo leaves it alone
    made[p] = protocol_.finish(hs, p, links, true);
  }
}

}  // namespace collie::transport::handshake

namespace collie::transport {

handshake::Listener& DialingTransport::listener(const char* call) const {
  COLLIE_USAGE_CHECK(listener_ != nullptr, "%s transport: %s() before listen()", name(), call);
  return *listener_;
}

void DialingTransport::serve(const CommContext& ctx) {
  handshake::Listener& l = listener("serve");
  prepare(ctx);
  dialer().serve(l, ctx);
}

std::vector<std::unique_ptr<Connection>> DialingTransport::connect(const CommContext& ctx,
                                                                   const std::vector<int>& peers) {
  handshake::Listener& l = listener("connect");
  prepare(ctx);
  auto out = dialer().connect(l, ctx, peers, /*dialAll=*/false);
  COLLIE_INFO(base::kLogNet, "%s: rank %d%s connected to %zu peer(s)%s", name(), ctx.rank,
              ctx.name.empty() ? "" : (" in " + ctx.name).c_str(), peers.size(), connectionDetail().c_str());
  return out;
}

std::vector<std::unique_ptr<Connection>> DialingTransport::dial(const CommContext& ctx, const std::vector<int>& peers) {
  handshake::Listener& l = listener("dial");
  prepare(ctx);
  return dialer().connect(l, ctx, peers, /*dialAll=*/true);
}

std::vector<std::unique_ptr<Connection>> DialingTransport::refuseDials(const CommContext& ctx,
                                                                       const MismatchRecord* why) {
  return dialer().refuseAll(ctx, why);
}

void DialingTransport::releasePeer(int peer) { dialer().release(peer); }

uint64_t DialingTransport::stashedHellos() const { return dialer().answeredEarly(); }

std::vector<int> DialingTransport::answeredPeers() const { return dialer().answeredPeers(); }

void DialingTransport::showWaitingCalls(const std::vector<Fingerprint>& calls) { dialer().showWaiting(calls); }

void DialingTransport::showLastCall(std::shared_ptr<const LastCall> last) { dialer().showLastCall(std::move(last)); }

std::optional<ToldCalls> DialingTransport::askWaitingCalls(const CommContext& ctx, int peer) {
  return dialer().askWaiting(ctx, peer);
}

void DialingTransport::showCards(std::shared_ptr<const CardBook> book) { dialer().showCards(std::move(book)); }

std::optional<CardAnswer> DialingTransport::askCard(const CommContext& ctx, int holder, int target,
                                                    std::chrono::milliseconds wait) {
  return dialer().askCard(ctx, holder, target, wait);
}

}  // namespace collie::transport
