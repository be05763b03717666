// Asking a peer which calls it waits in, or for another rank's contact card (see dialer.hpp): what a rank shows, how it
// answers on its accept loop's thread, and how a rank asks. Beside the dial rule: a question touches no pair's state.
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/socket.hpp"
#include "transport/dialer.hpp"

namespace collie::transport::handshake {
namespace {

/// How long askWaiting waits for a peer's answer: it runs inside a waiting call, once a second at most.
constexpr std::chrono::milliseconds kAskWait{250};

}  // namespace

void Dialer::showWaiting(const std::vector<Fingerprint>& calls) {
  std::lock_guard<std::mutex> lock(mu_);
  shown_ = WaitingCalls{};
  shown_.count = static_cast<uint32_t>(std::min<size_t>(calls.size(), WaitingCalls::kMax));
  std::copy_n(calls.begin(), shown_.count, shown_.calls);
}

void Dialer::showLastCall(std::shared_ptr<const LastCall> last) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = std::move(last);
}

void Dialer::tellWaiting(Link& link) const {
  WaitingCalls told;
  std::optional<MismatchRecord> why;
  bool failed;
  std::shared_ptr<const LastCall> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    told = shown_;
    failed = refusing_;
    why = refusalWhy_;
    last = last_;
  }
  if (const std::optional<Fingerprint> made = last ? last->read() : std::nullopt) {
    told.hasLast = 1;
    told.last = *made;
  }
  if (failed) {
    refuse(link, why ? kRefusedMismatch : kRefusedFailed, why.value_or(MismatchRecord{}));
  } else {
    answerWith(link, kToldWaiting, &told, sizeof(told));
  }
}

Link Dialer::ask(Handshake& hs, int peer, uint32_t type, const void* body, size_t bodyBytes, const std::string& what) {
  COLLIE_INTERNAL_CHECK(wire_.messageBytes() >= sizeof(Header) + bodyBytes,
                        "%s: a handshake message of %zu bytes cannot carry a question of %zu", transport_,
                        wire_.messageBytes(), bodyBytes);
  Link l;
  l.peer = peer;
  l.fd = protocol_.dialSocket(hs, peer, 0);
  std::vector<uint8_t> msg(wire_.messageBytes(), 0);
  const Header h = hs.header(type, peer, 0);
  std::memcpy(msg.data(), &h, sizeof(h));
  if (bodyBytes) std::memcpy(msg.data() + sizeof(h), body, bodyBytes);
  base::sendAll(l.fd.get(), msg.data(), msg.size(), hs.deadline(), what);
  l.buf.assign(wire_.messageBytes(), 0);
  base::recvAll(l.fd.get(), l.buf.data(), l.buf.size(), hs.deadline(), what);
  return l;
}

std::optional<ToldCalls> Dialer::askWaiting(const CommContext& ctx, int peer) {
  const std::string what = base::format("rank %d (asked which calls it waits in)", peer);
  try {
    Handshake hs(transport_, kind_, ctx, {peer}, channels_, wire_, kAskWait);
    Link l = ask(hs, peer, kAskWaiting, nullptr, 0, what);
    const Header& h = l.header();
    if (!hs.authentic(h) || h.fromRank != peer) return std::nullopt;
    if (h.type == kRefusedMismatch) failRefusedMismatch(hs, l, "answering this rank's question");
    if (h.type != kToldWaiting) return std::nullopt;
    WaitingCalls told;
    base::recvAll(l.fd.get(), &told, sizeof(told), hs.deadline(), what);
    if (told.count > WaitingCalls::kMax) return std::nullopt;
    ToldCalls out;
    out.waiting.assign(told.calls, told.calls + told.count);
    if (told.hasLast == 1) out.last = told.last;
    return out;
  } catch (const MismatchError&) {
    throw;
  } catch (const Error& e) {
    COLLIE_TRACE(base::kLogNet, "%s: rank %d got no answer from %s: %s", transport_, ctx.rank, what.c_str(), e.what());
    return std::nullopt;
  }
}

void Dialer::showCards(std::shared_ptr<const CardBook> book) {
  std::lock_guard<std::mutex> lock(mu_);
  cards_ = std::move(book);
}

void Dialer::tellCard(Link& link) const {
  std::shared_ptr<const CardBook> book;
  {
    std::lock_guard<std::mutex> lock(mu_);
    book = cards_;
  }
  CardAnswer told;
  std::memcpy(&told.target, link.buf.data() + sizeof(Header), sizeof(told.target));
  if (book) {
    if (const PeerInfo* card = book->find(told.target)) {
      told.status = CardAnswer::kCard;
      told.card = *card;
    } else if (book->up.rank >= 0) {
      told.status = CardAnswer::kAskUp;
      told.card = book->up;
    }
  }
  answerWith(link, kToldCard, &told, sizeof(told));
}

std::optional<CardAnswer> Dialer::askCard(const CommContext& ctx, int holder, int target,
                                          std::chrono::milliseconds wait) {
  const std::string what = base::format("rank %d (asked for rank %d's contact card)", holder, target);
  try {
    Handshake hs(transport_, kind_, ctx, {holder}, channels_, wire_, wait);
    const int32_t asked = target;
    Link l = ask(hs, holder, kAskCard, &asked, sizeof(asked), what);
    const Header& h = l.header();
    if (!hs.authentic(h) || h.fromRank != holder || h.type != kToldCard) return std::nullopt;
    CardAnswer told;
    base::recvAll(l.fd.get(), &told, sizeof(told), hs.deadline(), what);
    if (told.target != target) return std::nullopt;
    for (const TransportAddress& a : told.card.addresses)
      if (a.length > TransportAddress::kBytes) return std::nullopt;  // not a card this rank could use
    return told;
  } catch (const Error& e) {
    COLLIE_TRACE(base::kLogNet, "%s: rank %d got no answer from %s: %s", transport_, ctx.rank, what.c_str(), e.what());
    return std::nullopt;
  }
}

}  // namespace collie::transport::handshake
