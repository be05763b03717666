// Fuzzes COLLIE_ALGO's parser (core::AlgoSelection::parse, NCCL's grammar: "ring", "^tree",
// "allreduce:rhd;broadcast:tree"): any text is parsed or refused with collie::Error. A parsed selection answers
// allowed() for every collective and algorithm and keeps the spec it came from.
#include "algorithms/algorithms.hpp"
#include "base/errors.hpp"
#include "core/tuner.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  const std::string spec = fuzz::asString(data, size);
  core::AlgoSelection sel;
  try {
    sel = core::AlgoSelection::parse(spec);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_CHECK(sel.spec() == spec);
  int allowedPairs = 0;
  for (int c = 0; c <= static_cast<int>(algorithms::Collective::Recv); ++c)
    for (algorithms::Algorithm a : algorithms::kAllAlgorithms)
      allowedPairs += sel.allowed(static_cast<algorithms::Collective>(c), a) ? 1 : 0;
  FUZZ_CHECK(allowedPairs >= 0);
  return 0;
}
