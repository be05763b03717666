// Fuzzes the tuning file's parser (core::parseTuneText, behind readTuneFile: COLLIE_TUNE_FILE is read at init).
// Invariants: a file that parses gives only finite costs >= 0; a refused one leaves the costs it was given as
// they were (all lines or none are taken).
#include <cmath>

#include "base/errors.hpp"
#include "core/tuner.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  core::MeasuredCosts costs;
  costs.set("tcp", core::LinkCost{1e-5, 1e-9});
  try {
    core::parseTuneText(fuzz::asString(data, size), "fuzz", &costs);
  } catch (const Error&) {
    FUZZ_CHECK(costs.links.size() == 1 && costs.links[0].second.alpha == 1e-5 && costs.gamma == 0);
    return 0;
  }
  FUZZ_CHECK(std::isfinite(costs.gamma) && costs.gamma >= 0);
  for (const auto& [kind, c] : costs.links) {
    FUZZ_CHECK(!kind.empty());
    FUZZ_CHECK(std::isfinite(c.alpha) && c.alpha >= 0 && std::isfinite(c.beta) && c.beta >= 0);
    FUZZ_CHECK(std::isfinite(c.gap) && c.gap >= 0);
  }
  core::CostModel model = costs.modelFor({"tcp", "shm"});
  FUZZ_CHECK(std::isfinite(model.link.alpha) && std::isfinite(model.link.beta));
  return 0;
}
