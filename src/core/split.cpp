// Split (collieCommSplit): the communicators of the ranks that pass the same color, ordered by key (then by old
// rank), made from this one without a bootstrap and with O(N) bytes per rank:
//   1. every rank makes the new communicator's transports on this one's listeners (setup.hpp childTransports:
//      Transport::shareListener, a duplicate of the listening socket's handle with no other state), so the new
//      communicator opens no listening socket and the addresses in this communicator's PeerInfo table (which every
//      rank keeps: links_.ctx.peers) reach it. The listener lives while any communicator on it does, so the parent
//      may be destroyed first. A hello reaches the communicator whose secret it shows (accept_loop.hpp): the new
//      one's is this one's mixed with the split epoch and the color (splitSecret), so siblings never take each
//      other's dials;
//   2. the ranks all-gather (color, key, flags, tags taken) over this communicator's connections: 20 bytes per rank.
//      A transport that cannot share its listener (none of collie's own) gets a new one; only then (any rank says
//      so in its entry) a second all-gather carries the new listeners' addresses (kMaxAddresses x 24 bytes per
//      rank);
//   3. every rank computes the members of its color from the same table, and their PeerInfo from this
//      communicator's (childPeerInfo), and the new communicator connects on first use like any other, with the
//      parent's measured costs. Under a directory of cards (COLLIE_PEER_CARDS=directory, card_directory.hpp) each
//      rank first asks this communicator's directory for its seeds' cards in the child, every rank waits in a
//      barrier until all have, and the child gathers a directory of its own as init does.
// With Options::shareConnections the new communicator takes no listener of its own: it borrows this one's
// connections (link_share.hpp; each of its calls takes the family's lock) and tags its fingerprints. Otherwise the
// connections are its own: ARCHITECTURE.md (Split) says what each way costs. A rank with COLLIE_SPLIT_NOCOLOR takes
// part in the all-gathers and gets no communicator.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/call_fingerprint.hpp"
#include "core/communicator.hpp"
#include "core/group.hpp"

namespace collie::core {
namespace {

/// One rank's part of split's all-gather (int32 x 5). The magic tells a split's entry from another AllGather of
/// the same shape that a rank called instead (its fingerprint would match).
struct SplitEntry {
  static constexpr int32_t kMagic = 0x53504c54;  // "SPLT"
  int32_t magic;
  int32_t color;
  int32_t key;
  int32_t flags;                                 ///< kFreshAddresses | kShares
  static constexpr int32_t kFreshAddresses = 1;  ///< new listeners (a transport that cannot share): exchange addresses
  static constexpr int32_t kShares = 2;  ///< asks to share the parent's connections (every rank of a color must)
  static constexpr int32_t kEager = 4;   ///< its child connects every pair at init (every rank of a color must)
  uint32_t takenTags;  ///< kShares: bit i, candidate i of the child's tag is a live family member's here
};
static_assert(sizeof(SplitEntry) == 5 * sizeof(int32_t));

using AddressSet = std::array<transport::TransportAddress, transport::PeerInfo::kMaxAddresses>;

}  // namespace

std::unique_ptr<CommImpl> CommImpl::split(int color, int key, const Options& options) {
  COLLIE_ARG_CHECK(color >= 0 || color == COLLIE_SPLIT_NOCOLOR,
                   "%s rank %d: split color=%d: expected a non-negative color or COLLIE_SPLIT_NOCOLOR", name_.c_str(),
                   rank_, color);
  COLLIE_USAGE_CHECK(!inGroup(), "%s rank %d: split called inside a group", name_.c_str(), rank_);
  COLLIE_INTERNAL_CHECK(static_cast<int>(links_.ctx.peers.size()) == nranks_,
                        "%s rank %d: no PeerInfo table to split from", name_.c_str(), rank_);
  const int epoch = splitCount_++;
  const bool share = options.shareConnections && color != COLLIE_SPLIT_NOCOLOR;
  ChildTransports transports;
  transport::PeerInfo fresh;  // the addresses of new listeners, for transports that cannot share theirs
  if (color != COLLIE_SPLIT_NOCOLOR && !share) transports = childTransports(links_.transports, &fresh);
  const bool mineFresh = std::any_of(std::begin(fresh.addresses), std::end(fresh.addresses),
                                     [](const transport::TransportAddress& a) { return a.kind != 0; });

  const bool eager =
      color != COLLIE_SPLIT_NOCOLOR &&
      connectEagerly(options.connect == ConnectMode::Default ? connectMode_ : options.connect, links_.transports);
  const SplitEntry mine{SplitEntry::kMagic, color, key,
                        (mineFresh ? SplitEntry::kFreshAddresses : 0) | (share ? SplitEntry::kShares : 0) |
                            (eager ? SplitEntry::kEager : 0),
                        share ? share_->family->takenTagCandidates(planner_.tag(), epoch, color) : 0};
  std::vector<SplitEntry> all(static_cast<size_t>(nranks_));
  run(makeOp(algorithms::Collective::AllGather, &mine, all.data(), 5, DataType::Int32, ReduceOp::Sum, 0));
  bool exchange = false;
  for (int r = 0; r < nranks_; ++r) {
    const SplitEntry& e = all[static_cast<size_t>(r)];
    COLLIE_ENFORCE(e.magic == SplitEntry::kMagic, ErrorCode::InvalidUsage,
                   "%s rank %d: split's all-gather got no split entry from rank %d (it called another "
                   "AllGather(int32, 5) instead of split: every rank must call split)",
                   name_.c_str(), rank_, r);
    exchange |= (e.flags & SplitEntry::kFreshAddresses) != 0;
  }
  std::vector<AddressSet> addresses;
  if (exchange) {  // only where a transport cannot share its listener: O(N) bytes per rank still
    AddressSet myAddresses;
    std::copy(std::begin(fresh.addresses), std::end(fresh.addresses), myAddresses.begin());
    addresses.resize(static_cast<size_t>(nranks_));
    run(makeOp(algorithms::Collective::AllGather, &myAddresses, addresses.data(), sizeof(AddressSet), DataType::Uint8,
               ReduceOp::Sum, 0));
  }
  std::vector<int> members;  // old ranks, in new-rank order
  for (int r = 0; r < nranks_; ++r)
    if (all[static_cast<size_t>(r)].color == color && color != COLLIE_SPLIT_NOCOLOR) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key; });
  const int newSize = static_cast<int>(members.size());
  const int newRank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  // Under a directory of cards a child with connections of its own gathers its own directory, as init does, from
  // its seeds' cards, which this communicator's directory tells; where any rank asks, no rank leaves the split (and
  // may destroy this communicator) before every rank has learnt them.
  const bool gather = links_.cardDirectory && !share && color != COLLIE_SPLIT_NOCOLOR && tableGatherNeeded(newSize);
  const bool anyAsks = std::any_of(all.begin(), all.end(), [](const SplitEntry& e) {
    return e.color != COLLIE_SPLIT_NOCOLOR && (e.flags & SplitEntry::kShares) == 0;
  });
  if (links_.cardDirectory && anyAsks) {
    if (color != COLLIE_SPLIT_NOCOLOR && !share)
      learnChildSeeds(members, newRank, base::format("split %d color %d", epoch, color));
    barrier();
  }
  if (color == COLLIE_SPLIT_NOCOLOR) return nullptr;
  // Sharing is decided per color: a rank that shares sends on the parent's connections, one that does not waits on
  // its own, and both would wait until the timeout. Every rank of the color sees the same entries and fails alike.
  for (int r = 0; r < nranks_; ++r) {
    const SplitEntry& e = all[static_cast<size_t>(r)];
    COLLIE_ENFORCE(e.color != color || ((e.flags & SplitEntry::kShares) != 0) == share, ErrorCode::InvalidUsage,
                   "%s rank %d: split color %d: rank %d %s the parent's connections and this rank %s: every rank of "
                   "a color must pass the same shareConnections (splitShare)",
                   name_.c_str(), rank_, color, r, share ? "does not share" : "shares", share ? "does" : "does not");
    // Likewise an eager child would wait at init for dials that lazy ranks never make.
    COLLIE_ENFORCE(e.color != color || ((e.flags & SplitEntry::kEager) != 0) == eager, ErrorCode::InvalidUsage,
                   "%s rank %d: split color %d: rank %d connects %s and this rank %s: every rank of a color must "
                   "pass the same connect mode (the config's, else COLLIE_CONNECT)",
                   name_.c_str(), rank_, color, r, eager ? "lazily" : "eagerly", eager ? "eagerly" : "lazily");
  }

  // A sharing child's tag: the first candidate that no member of the family alive on a rank of the color has (every
  // rank of the color ORs the same entries).
  uint32_t tag = 0;
  if (share) {
    uint32_t taken = 0;
    for (const SplitEntry& e : all)
      if (e.color == color) taken |= e.takenTags;
    const int first = std::countr_one(taken);  // the first candidate no rank of the color has taken
    COLLIE_ENFORCE(first < kTagCandidates, ErrorCode::InvalidUsage,
                   "%s rank %d: split color %d: every one of the %d tags a child sharing the parent's connections may "
                   "take here is the tag of a sharing communicator still alive on a rank of the color: destroy some "
                   "of them first",
                   name_.c_str(), rank_, color, kTagCandidates);
    tag = sharingTagCandidate(planner_.tag(), epoch, color, first);
  }

  std::vector<transport::TransportKind> kept = transports.shared;  // whose addresses the new table keeps
  if (share)  // all: its pairs choose their transport as this communicator's do
    for (const auto& t : links_.transports) kept.push_back(t->kind());
  std::vector<transport::PeerInfo> peers;
  for (int i = 0; i < newSize; ++i) {
    const size_t old = static_cast<size_t>(members[static_cast<size_t>(i)]);
    peers.push_back(childPeerInfo(links_.ctx.peers[old], i, kept, exchange ? addresses[old].data() : nullptr));
  }
  Options opts = options;
  if (opts.timeout.count() == 0) opts.timeout = timeout_;
  if (opts.connect == ConnectMode::Default) opts.connect = connectMode_;
  if (opts.name.empty()) opts.name = base::format("%s.split%d.color%d", name_.c_str(), epoch, color);
  COLLIE_INFO(base::kLogInit, "%s rank %d: split %d color %d: rank %d of %d in %s (%s)", name_.c_str(), rank_, epoch,
              color, newRank, newSize, opts.name.c_str(),
              share ? "sharing this communicator's connections"
                    : base::format("%zu listener(s) shared", transports.shared.size()).c_str());
  std::shared_ptr<LinkShare> lent;  // share: the new communicator's links, lent by this one's
  if (share) {
    lent = std::make_shared<LinkShare>(share_->family);
    lent->lender = share_;
    lent->lenderRank = members;
    lent->links.transports = lendingTransports(share_, members);
    share_->family->shared.store(true, std::memory_order_release);  // calls of the family take its lock from now on
  }
  std::unique_ptr<CommImpl> comm(new CommImpl(newRank, newSize, opts, lent));
  comm->secret_ = splitSecret(secret_, epoch, color);  // a secret of its own
  if (!share) comm->links_.transports = std::move(transports.list);
  comm->links_.cardDirectory = links_.cardDirectory && !share;  // a sharing child connects through this one's links
  comm->planner_.setTag(tag);
  if (share) share_->family->holdTag(tag);  // given back by ~CommImpl
  comm->measured_ = measured_;              // the parent's measurements, for the kinds the new communicator uses
  const std::vector<std::string> kinds = kindsInUse(comm->links_.transports, peers);
  comm->planner_.tuner() = Tuner(measured_.modelFor(kinds), planner_.tuner().selection());
  comm->connect(peers, gather);
  if (gather) comm->closeGatherOnlyLinks();
  comm->planner_.tuner().setModel(comm->costModel(kinds));  // now that its host layout is known
  comm->startRecording();
  return comm;
}

}  // namespace collie::core
