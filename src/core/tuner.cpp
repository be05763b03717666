#include "core/tuner.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/params.hpp"

namespace collie::core {

using algorithms::Algorithm;
using algorithms::Collective;

void validateAlgoParam() {
  const std::string& algo = params::algo();
  if (algo.empty()) return;
  // NCCL grammar: a list of names, or "coll:names;coll:names". Only the ring exists today.
  std::string names = algo;
  for (char& c : names) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  bool onlyRing = names.find("ring") != std::string::npos && names.find("tree") == std::string::npos &&
                  names.find("rhd") == std::string::npos && names.find('^') == std::string::npos;
  COLLIE_ARG_CHECK(onlyRing, "COLLIE_ALGO='%s': only 'ring' is available in this build", algo.c_str());
}

TunedPlan tune(Collective coll, int nranks, size_t bytes) {
  TunedPlan plan;
  bool p2p = coll == Collective::AllToAll || coll == Collective::Send || coll == Collective::Recv;
  plan.algorithm = p2p ? Algorithm::Direct : Algorithm::Ring;
  // Slices: small enough that a ring of n ranks has several slices per chunk in flight, large enough that
  // per-slice overhead (a syscall, a reduction call) stays small.
  size_t chunk = std::max<size_t>(bytes / static_cast<size_t>(std::max(1, nranks)), 1);
  size_t slice = std::clamp<size_t>(chunk / 4, 64 * 1024, 1024 * 1024);
  int64_t forced = params::sliceBytes();
  plan.sliceBytes = forced > 0 ? static_cast<size_t>(forced) : slice;
  int64_t inflight = params::slicesInFlight();
  plan.slicesInFlight = inflight > 0 ? static_cast<int>(inflight) : 4;
  return plan;
}

}  // namespace collie::core
