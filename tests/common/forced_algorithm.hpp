// ForcedAlgorithm: forces COLLIE_ALGO's grammar (e.g. "ring", "allreduce:tree") on the communicators created while
// it lives, as the environment variable would, and restores the default when it goes out of scope.
#pragma once

#include <optional>
#include <string>

#include "core/tuner.hpp"

namespace collie::test {

class ForcedAlgorithm {
 public:
  explicit ForcedAlgorithm(const std::string& spec) { core::setAlgoOverride(spec); }
  ~ForcedAlgorithm() { core::setAlgoOverride(std::nullopt); }
  ForcedAlgorithm(const ForcedAlgorithm&) = delete;
  ForcedAlgorithm& operator=(const ForcedAlgorithm&) = delete;
};

}  // namespace collie::test
