// Shrink: the communicator of the ranks that survive this one (NCCL 2.27's ncclCommShrink), for jobs that go on
// after losing a rank. It must work when this communicator has failed (a peer was SIGKILLed and a call threw),
// so it uses nothing that the failure may have broken:
//   - no bootstrap root: the root (rank 0's process, or the one that made the id) may be the rank that died.
//     Every rank already holds the PeerInfo table it connected with (links_.ctx.peers), which says where each
//     survivor's transports listen; the listeners stay open for the communicator's life, so they can take new hellos.
//   - no connection of this communicator: a failed call may have left partial messages on them. The survivors
//     connect afresh, through transports that share this communicator's listeners (Transport::shareListener:
//     a duplicate of the listening socket, with no other state, and for shm a control line and waker of its
//     own, bound to the new communicator's poller). A transport that cannot share its listener is left out:
//     its addresses are dropped from the new table, so every pair falls back to the next transport alike.
//   - under a directory of cards (COLLIE_PEER_CARDS=directory, card_directory.hpp) each survivor first asks this
//     communicator's directory for the cards of its seeds in the new one (its neighbours in the new tree, the top
//     of it), which a rank that is gone cannot stop while an ancestor of the seed lives, then the survivors gather
//     their own directory as init does;
//   - no round of agreement: every survivor computes the same result from the same exclude list (NCCL's
//     contract). Survivors keep their order: new rank i is the i-th surviving old rank.
// The new secret is this communicator's secret mixed with the shrink epoch (how many shrinks this
// communicator made before) and the sorted exclude list. A survivor passed a different list therefore presents
// a different secret: the others refuse its hellos as a stranger's, and the connect fails (RemoteError, or
// Timeout within the communicator's timeout) on the ranks involved, with a message that says what to check,
// instead of connecting ranks that disagree about who is who. An excluded rank that calls shrink gets
// InvalidUsage at once.
#include <algorithm>
#include <array>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/card_directory.hpp"
#include "core/communicator.hpp"
#include "core/group.hpp"
#include "transport/handshake.hpp"

namespace collie::core {
namespace {

/// The secret of the communicator made by the `epoch`-th shrink of one with `parent`, excluding `sorted`.
std::array<uint8_t, 16> shrinkSecret(const std::array<uint8_t, 16>& parent, int epoch, const std::vector<int>& sorted) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over "shrink", the epoch and the list
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(0x6b6e69726873ull);  // "shrink"
  mix(static_cast<uint64_t>(epoch));
  mix(sorted.size());
  for (int r : sorted) mix(static_cast<uint64_t>(static_cast<uint32_t>(r)));
  return deriveSecret(parent, h);
}

}  // namespace

std::unique_ptr<CommImpl> CommImpl::shrink(const std::vector<int>& exclude, const Options& options) {
  COLLIE_USAGE_CHECK(!inGroup(), "shrink called inside a group");
  std::vector<int> sorted;
  for (size_t i = 0; i < exclude.size(); ++i) {
    const int r = exclude[i];
    COLLIE_ARG_CHECK(r >= 0 && r < nranks_, "%s rank %d: shrink's excludeRanks[%zu]=%d: expected 0 <= rank < %d",
                     name_.c_str(), rank_, i, r, nranks_);
    COLLIE_ARG_CHECK(std::find(sorted.begin(), sorted.end(), r) == sorted.end(),
                     "%s rank %d: shrink's excludeRanks lists rank %d twice", name_.c_str(), rank_, r);
    sorted.push_back(r);
  }
  std::sort(sorted.begin(), sorted.end());
  COLLIE_USAGE_CHECK(!std::binary_search(sorted.begin(), sorted.end(), rank_),
                     "%s rank %d: shrink called by a rank in its own exclude list (an excluded rank must not call "
                     "shrink; only the survivors do)",
                     name_.c_str(), rank_);
  COLLIE_INTERNAL_CHECK(static_cast<int>(links_.ctx.peers.size()) == nranks_,
                        "%s rank %d: no PeerInfo table to shrink from", name_.c_str(), rank_);
  const int epoch = shrinkCount_++;

  // Transports on this communicator's listeners; the addresses of those that cannot share theirs are dropped.
  ChildTransports transports = childTransports(links_.transports, nullptr);
  std::vector<int> survivors;  // old ranks, in new-rank order
  for (int r = 0; r < nranks_; ++r)
    if (!std::binary_search(sorted.begin(), sorted.end(), r)) survivors.push_back(r);
  const int newSize = static_cast<int>(survivors.size());
  const int newRank = static_cast<int>(std::find(survivors.begin(), survivors.end(), rank_) - survivors.begin());
  const std::string excluded = sorted.empty() ? std::string("none") : transport::handshake::rankList(sorted);
  if (links_.cardDirectory) learnChildSeeds(survivors, newRank, "shrink excluding rank(s) " + excluded);
  std::vector<transport::PeerInfo> peers;
  for (int r : survivors)
    peers.push_back(childPeerInfo(links_.ctx.peers[static_cast<size_t>(r)], static_cast<int>(peers.size()),
                                  transports.shared, nullptr));

  Options opts = options;
  if (opts.timeout.count() == 0) opts.timeout = timeout_;
  if (opts.connect == ConnectMode::Default) opts.connect = connectMode_;
  if (opts.name.empty()) opts.name = base::format("%s.shrink%d", name_.c_str(), epoch);
  COLLIE_INFO(base::kLogInit, "%s rank %d: shrink %d excluding rank(s) %s: rank %d of %d in %s", name_.c_str(), rank_,
              epoch, excluded.c_str(), newRank, newSize, opts.name.c_str());
  std::unique_ptr<CommImpl> comm(new CommImpl(newRank, newSize, opts));
  comm->secret_ = shrinkSecret(secret_, epoch, sorted);
  comm->links_.transports = std::move(transports.list);
  comm->links_.cardDirectory = links_.cardDirectory;
  comm->measured_ = measured_;  // the parent's measurements, for the kinds the new communicator uses
  const std::vector<std::string> used = kindsInUse(comm->links_.transports, peers);
  comm->planner_.tuner() = Tuner(measured_.modelFor(used), planner_.tuner().selection());
  try {
    // Under a directory of cards the survivors gather their own, as init does (each has its seeds' cards).
    const bool gather = comm->links_.cardDirectory && tableGatherNeeded(newSize);
    comm->connect(peers, gather);
    if (gather) comm->closeGatherOnlyLinks();
    // With lazy connection nothing was connected yet: a barrier makes the survivors meet (each connects to the
    // peers of one AllReduce), so that one with another exclude list fails here rather than at a later call.
    if (!connectEagerly(comm->connectMode_, comm->links_.transports)) comm->barrier();
  } catch (const Error& e) {
    throw Error(e.code(), base::format("%s rank %d: shrink excluding rank(s) %s could not connect the %d survivors "
                                       "(every survivor must call shrink with the same exclude list, and every rank "
                                       "not in it must be alive and call it): %s",
                                       name_.c_str(), rank_, excluded.c_str(), newSize, e.what()));
  }
  comm->planner_.tuner().setModel(comm->costModel(used));
  comm->startRecording();  // the flight recorder counts the user's calls from here
  return comm;
}

}  // namespace collie::core
