// The algorithm registry: which builders exist and how to call one.
#pragma once

#include "algorithms/schedule.hpp"

namespace collie::algorithms {

enum class Algorithm : uint8_t { Ring, Direct };
const char* algorithmName(Algorithm algo);

/// Whether `algo` implements `coll`.
bool supports(Algorithm algo, Collective coll);
/// Builds this rank's schedule; the algorithm must support the collective.
Schedule build(Algorithm algo, const ScheduleKey& key);

// One builder per algorithm (ring.cpp, direct.cpp).
Schedule buildRing(const ScheduleKey& key);
Schedule buildDirect(const ScheduleKey& key);

}  // namespace collie::algorithms
