// Which host each rank runs on, and the rank arithmetic of host-aware (hierarchical) schedules; pure, no I/O.
//
// A HostLayout numbers the hosts 0..H-1 in the order of their lowest rank and lists each host's ranks in rank
// order; a rank's local index is its place in that list. Hosts may hold different numbers of ranks (uneven).
// The hierarchical schedules cut the buffer into S = maxLocal shards (the most ranks any host holds) and give
// shard j, on host h, to the rank of local index j mod L_h (L_h: the ranks of host h), so that on every host each
// rank owns at least one shard and, when all hosts hold S ranks, exactly one. The owners of shard j on the H hosts
// form the group that moves shard j between hosts: each rank's link to the network carries its own shards.
// AllGather and ReduceScatter, whose blocks belong to ranks, give shard j the blocks of the ranks of local index j
// (blockRanks): the owners of shard j are then those very ranks, plus, on a host with fewer than j+1 ranks, a rank
// that carries the shard without a block of its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace collie::algorithms::patterns {

struct HostLayout {
  std::vector<int> hostOf;              ///< by rank: host index; empty: every rank on one host
  std::vector<std::vector<int>> ranks;  ///< by host: its ranks, ascending
  std::vector<int> local;               ///< by rank: index among its host's ranks
  int maxLocal = 1;                     ///< the most ranks on one host

  int nhosts() const { return ranks.empty() ? 1 : static_cast<int>(ranks.size()); }
  /// True when the layout describes `nranks` ranks (an empty layout describes any number: one host).
  bool describes(int nranks) const { return hostOf.empty() || static_cast<int>(hostOf.size()) == nranks; }

  /// From one identifier per rank (equal identifiers: the same host).
  static HostLayout fromIds(const std::vector<uint64_t>& ids) {
    HostLayout l;
    std::vector<uint64_t> seen;
    for (size_t r = 0; r < ids.size(); ++r) {
      size_t h = 0;
      while (h < seen.size() && seen[h] != ids[r]) ++h;
      if (h == seen.size()) {
        seen.push_back(ids[r]);
        l.ranks.emplace_back();
      }
      l.hostOf.push_back(static_cast<int>(h));
      l.local.push_back(static_cast<int>(l.ranks[h].size()));
      l.ranks[h].push_back(static_cast<int>(r));
    }
    for (const auto& rs : l.ranks) l.maxLocal = std::max(l.maxLocal, static_cast<int>(rs.size()));
    return l;
  }
  /// Host of rank r is r / perHost (mpirun's --map-by slot): the last host may hold fewer.
  static HostLayout blocks(int nranks, int perHost) {
    std::vector<uint64_t> ids;
    for (int r = 0; r < nranks; ++r) ids.push_back(static_cast<uint64_t>(r / perHost));
    return fromIds(ids);
  }
  /// Host of rank r is r mod hosts (the test bed's placement, mpirun's --map-by node).
  static HostLayout roundRobin(int nranks, int hosts) {
    std::vector<uint64_t> ids;
    for (int r = 0; r < nranks; ++r) ids.push_back(static_cast<uint64_t>(r % hosts));
    return fromIds(ids);
  }

  /// The rank that owns shard j on host h.
  int owner(int h, int j) const {
    const auto& rs = ranks[static_cast<size_t>(h)];
    return rs[static_cast<size_t>(j) % rs.size()];
  }
  /// The rank of local index j on host h, or -1 where host h holds j ranks or fewer: whose block shard j carries
  /// there (AllGather, ReduceScatter).
  int blockRank(int h, int j) const {
    const auto& rs = ranks[static_cast<size_t>(h)];
    return static_cast<size_t>(j) < rs.size() ? rs[static_cast<size_t>(j)] : -1;
  }
  /// Flat-ring edges r -> r+1 mod n that leave host h, most over the hosts: how many ring streams share one
  /// host's network link.
  int ringCrossings() const {
    const int n = static_cast<int>(hostOf.size());
    if (n < 2) return 0;
    std::vector<int> out(ranks.size(), 0);
    int most = 0;
    for (int r = 0; r < n; ++r) {
      const int h = hostOf[static_cast<size_t>(r)];
      if (h != hostOf[static_cast<size_t>((r + 1) % n)]) most = std::max(most, ++out[static_cast<size_t>(h)]);
    }
    return most;
  }
};

}  // namespace collie::algorithms::patterns
