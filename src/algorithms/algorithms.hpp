// The algorithm registry: which builders exist and how to call one.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "algorithms/patterns/hosts.hpp"
#include "algorithms/schedule.hpp"

namespace collie::algorithms {

/// Ring (ring.cpp), Direct exchange for AllReduce of tiny messages, AllToAll and Send/Recv (direct.cpp), double binary
/// Tree (tree.cpp), recursive HalvingDoubling (rhd.cpp), Hierarchical: inside hosts, then between them
/// (hierarchical.cpp).
enum class Algorithm : uint8_t { Ring, Direct, Tree, HalvingDoubling, Hierarchical };
inline constexpr int kNumAlgorithms = 5;
inline constexpr Algorithm kAllAlgorithms[kNumAlgorithms] = {Algorithm::Ring, Algorithm::Direct, Algorithm::Tree,
                                                             Algorithm::HalvingDoubling, Algorithm::Hierarchical};
/// "ring", "direct", "tree", "rhd", "hier".
const char* algorithmName(Algorithm algo);
/// Parses an algorithmName (case-insensitive; "halving_doubling" is accepted for "rhd", "hierarchical" for "hier").
/// False if unknown.
bool parseAlgorithm(const std::string& name, Algorithm* algo);

/// Parses a collective name as used by COLLIE_ALGO and the tools: "allreduce", "broadcast", "reduce",
/// "allgather", "reducescatter", "alltoall", "send", "recv" (case-insensitive, '_' ignored). False if unknown.
bool parseCollective(const std::string& name, Collective* coll);

/// A built schedule is identified by its algorithm and key; caches of schedules (the communicator's, and
/// perf/bench_schedule's measurement of it) hash that pair with this.
using ScheduleId = std::pair<Algorithm, ScheduleKey>;
struct ScheduleIdHash {
  size_t operator()(const ScheduleId& id) const;
};

/// Whether `algo` implements `coll`, at every number of ranks: the only statement of what is supported. The tuner
/// and COLLIE_ALGO forcing choose among supported pairs; nothing falls back to another algorithm elsewhere.
bool supports(Algorithm algo, Collective coll);
/// Builds this rank's schedule. Steps that move nothing are dropped. Throws InvalidUsage naming the collective
/// and the algorithm when !supports(algo, key.coll). `hosts` says which host each rank runs on (only Hierarchical
/// reads it; empty: every rank on one host); it must describe key.nranks ranks.
Schedule build(Algorithm algo, const ScheduleKey& key, const patterns::HostLayout& hosts = {});
/// Throws InvalidUsage: "algorithm <algo> does not implement <collective>".
[[noreturn]] void refuseUnsupported(Algorithm algo, Collective coll);

// One builder per algorithm; build() calls them. Each throws (refuseUnsupported) on a collective it does not
// implement.
Schedule buildRing(const ScheduleKey& key);
Schedule buildDirect(const ScheduleKey& key);
Schedule buildTree(const ScheduleKey& key);
Schedule buildHalvingDoubling(const ScheduleKey& key);
Schedule buildHierarchical(const ScheduleKey& key, const patterns::HostLayout& hosts);

}  // namespace collie::algorithms
