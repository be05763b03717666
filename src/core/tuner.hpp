// The tuner: which algorithm runs a call and how it is pipelined. Every choice depends only on what all ranks
// of the call agree on (collective, nranks, bytes, params), so both ends of every link decide alike.
// Today: ring for the reductions and gathers, direct exchange for AllToAll and Send/Recv; COLLIE_ALGO can
// only name "ring" until the other algorithms land.
#pragma once

#include <cstddef>

#include "algorithms/algorithms.hpp"

namespace collie::core {

struct TunedPlan {
  algorithms::Algorithm algorithm = algorithms::Algorithm::Ring;
  size_t sliceBytes = 0;
  int slicesInFlight = 0;
};

/// `bytes`: the user-visible message size (count x element size, per rank for gathers/scatters).
TunedPlan tune(algorithms::Collective coll, int nranks, size_t bytes);

/// Checks COLLIE_ALGO once; throws InvalidArgument naming the variable if it asks for something unknown.
void validateAlgoParam();

}  // namespace collie::core
