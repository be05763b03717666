// The directory of contact cards (see card_directory.hpp): host records, each rank's book, and the lookup.
#include "core/card_directory.hpp"

#include <strings.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/communicator.hpp"
#include "transport/handshake.hpp"

namespace collie::core {
namespace {

/// How long one question may go unanswered before the rank asked counts as gone (a listener with no desk for the
/// communicator holds a hello kHelloWait, 2 s, before it closes it).
constexpr std::chrono::milliseconds kAskWait{5000};
/// A rank asked before it made its book (it is finishing init's all-gather) answers kNone: asked again after this.
constexpr std::chrono::milliseconds kNotReadyPause{2};

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

/// `r`'s ancestors in init's tree, its parent first.
std::vector<int> ancestorsOf(int r, int n) {
  std::vector<int> out;
  for (int a = treePlace(r, n).parent; a >= 0; a = treePlace(a, n).parent) out.push_back(a);
  return out;
}

void learnCard(Links& links, int p, base::Deadline deadline) {
  transport::CommContext& ctx = links.ctx;
  const int n = ctx.nranks, me = ctx.rank;
  std::vector<int> asked, done;  // done: gone, silent, or it named its parent already
  const auto usable = [&](int r) {
    const transport::PeerInfo& c = ctx.peers[static_cast<size_t>(r)];
    return r != me && c.rank == r && transport::contactKnown(c) && !contains(done, r);
  };
  const std::vector<int> holders = ancestorsOf(p, n);  // lowest first: each keeps p's card
  const std::vector<int> mine = ancestorsOf(me, n);
  base::Deadline notReadyUntil{};
  while (!transport::contactKnown(ctx.peers[static_cast<size_t>(p)])) {
    COLLIE_ENFORCE(!(ctx.abort && ctx.abort->load()), ErrorCode::InvalidUsage,
                   "%s rank %d: aborted while learning rank %d's contact card", ctx.name.c_str(), me, p);
    COLLIE_ENFORCE(base::Deadline::clock::now() < deadline, ErrorCode::Timeout,
                   "%s rank %d: timed out learning rank %d's contact card from the directory (asked rank(s) %s)",
                   ctx.name.c_str(), me, p, transport::handshake::rankList(asked).c_str());
    int ask = -1;
    for (int h : holders)
      if (usable(h)) {
        ask = h;
        break;
      }
    const bool holds = ask >= 0;
    if (!holds)  // the highest of this rank's own ancestors below p's: it names its parent, one step closer
      for (int a : mine) {
        if (subtreeHolds(a, p, n)) break;
        if (usable(a)) ask = a;
      }
    COLLIE_ENFORCE(ask >= 0, ErrorCode::RemoteError,
                   "%s rank %d: cannot learn rank %d's contact card (COLLIE_PEER_CARDS=directory): every rank that "
                   "keeps it and that this rank can reach is gone or did not answer (asked rank(s) %s; the ranks that "
                   "keep it: %s)",
                   ctx.name.c_str(), me, p, asked.empty() ? "none" : transport::handshake::rankList(asked).c_str(),
                   transport::handshake::rankList(holders).c_str());
    const int t = links.transportOf[static_cast<size_t>(ask)];
    COLLIE_INTERNAL_CHECK(t >= 0, "%s rank %d: no transport to ask rank %d", ctx.name.c_str(), me, ask);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - base::Deadline::clock::now());
    const std::optional<transport::CardAnswer> answer = links.transports[static_cast<size_t>(t)]->askCard(
        ctx, ask, p, std::max(std::chrono::milliseconds(1), std::min(left, kAskWait)));
    if (!contains(asked, ask)) asked.push_back(ask);
    const transport::PeerInfo& record = ctx.peers[static_cast<size_t>(p)];
    if (answer && answer->status == transport::CardAnswer::kCard && holds && answer->card.rank == p &&
        answer->card.hostHash == record.hostHash && answer->card.pid == record.pid) {
      ctx.peers[static_cast<size_t>(p)] = answer->card;
      COLLIE_TRACE(base::kLogInit, "%s rank %d: learnt rank %d's contact card from rank %d", ctx.name.c_str(), me, p,
                   ask);
      return;
    }
    const int up = treePlace(ask, n).parent;
    if (answer && answer->status == transport::CardAnswer::kAskUp && !holds && answer->card.rank == up &&
        answer->card.hostHash == ctx.peers[static_cast<size_t>(up)].hostHash) {
      if (!transport::contactKnown(ctx.peers[static_cast<size_t>(up)]))
        ctx.peers[static_cast<size_t>(up)] = answer->card;
      done.push_back(ask);  // asking it again would name the same rank
      continue;
    }
    if (answer && answer->status == transport::CardAnswer::kNone) {  // still in init: ask again shortly
      const base::Deadline now = base::Deadline::clock::now();
      if (notReadyUntil == base::Deadline{}) notReadyUntil = now + kAskWait;
      if (now < notReadyUntil) {
        std::this_thread::sleep_for(kNotReadyPause);
        continue;
      }
    }
    notReadyUntil = {};
    done.push_back(ask);  // gone, silent, or an answer that does not fit: ask another
    COLLIE_INFO(base::kLogInit, "%s rank %d: rank %d gave no usable answer for rank %d's contact card; asking another",
                ctx.name.c_str(), me, ask, p);
  }
}

}  // namespace

bool cardDirectoryMode() { return strcasecmp(base::params::peerCards().c_str(), "directory") == 0; }

HostRecord hostRecordOf(const transport::PeerInfo& info) {
  HostRecord r;
  r.rank = info.rank;
  r.pid = info.pid;
  r.hostHash = info.hostHash;
  r.netNs = info.netNs;
  for (int i = 0; i < transport::PeerInfo::kMaxAddresses; ++i) r.kinds[i] = info.addresses[i].kind;
  return r;
}

transport::PeerInfo peerInfoOf(const HostRecord& record) {
  transport::PeerInfo info;
  info.rank = record.rank;
  info.pid = record.pid;
  info.hostHash = record.hostHash;
  info.netNs = record.netNs;
  for (int i = 0; i < transport::PeerInfo::kMaxAddresses; ++i) info.addresses[i].kind = record.kinds[i];
  return info;
}

std::shared_ptr<const transport::CardBook> makeCardBook(int rank, int nranks,
                                                        const std::vector<transport::PeerInfo>& table) {
  auto book = std::make_shared<transport::CardBook>();
  const TreePlace place = treePlace(rank, nranks);
  book->nranks = nranks;
  book->first = place.first;
  for (int i = 0; i < place.size; ++i) {
    const transport::PeerInfo& card = table[static_cast<size_t>((place.first + i) % nranks)];
    COLLIE_INTERNAL_CHECK(card.rank == (place.first + i) % nranks && transport::contactKnown(card),
                          "rank %d of %d: its subtree's card of rank %d is not known", rank, nranks,
                          (place.first + i) % nranks);
    book->cards.push_back(card);
  }
  if (place.parent >= 0) book->up = table[static_cast<size_t>(place.parent)];
  return book;
}

int CommImpl::knownContactCards() const {
  int known = 0;
  for (const transport::PeerInfo& c : links_.ctx.peers)
    known += c.rank >= 0 && c.rank != rank_ && transport::contactKnown(c);
  return known;
}

void CommImpl::learnChildSeeds(const std::vector<int>& members, int newRank, const std::string& what) {
  std::vector<int> seeds;
  for (int s : directorySeeds(newRank, static_cast<int>(members.size())))
    seeds.push_back(members[static_cast<size_t>(s)]);
  try {
    learnCards(links_, seeds);
  } catch (const Error& e) {
    throw Error(e.code(), base::format("%s rank %d: %s: %s", name_.c_str(), rank_, what.c_str(), e.what()));
  }
}

bool CommImpl::knowsContactCard(int peer) const {
  const transport::PeerInfo& c = links_.ctx.peers[static_cast<size_t>(peer)];
  return c.rank == peer && transport::contactKnown(c);
}

void learnCards(Links& links, const std::vector<int>& peers) {
  const std::chrono::milliseconds timeout =
      links.ctx.timeout.count() > 0 ? links.ctx.timeout : std::chrono::milliseconds(base::params::timeoutMs());
  const base::Deadline deadline = base::Deadline::clock::now() + timeout;
  for (int p : peers)
    if (p != links.ctx.rank && !transport::contactKnown(links.ctx.peers[static_cast<size_t>(p)]))
      learnCard(links, p, deadline);
}

}  // namespace collie::core
