// What every fuzz harness (tests/fuzz/fuzz_*.cpp) shares: FUZZ_CHECK, an invariant whose failure is a finding
// (it aborts, which libFuzzer and the replay test both report as a crash), and the bytes as a string.
//
// The contract each harness checks: a parser given any bytes returns or throws collie::Error. Any other exception
// escapes LLVMFuzzerTestOneInput and aborts; a read out of bounds or undefined behaviour is caught by ASan/UBSan
// in the fuzz build (and in the asan preset, which runs the replay tests too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace collie::fuzz {

inline std::string asString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace collie::fuzz
