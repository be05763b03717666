// The main of the replay tests (fuzz_replay_<harness>, label unit): every file in the directories named on the
// command line goes once through the harness's LLVMFuzzerTestOneInput, in name order. The first directory (the
// harness's seed corpus) must hold at least one file; the others (tests/fuzz/regressions/<harness>/: inputs
// that once crashed) may be missing. A crash, a failed FUZZ_CHECK or an exception other than collie::Error ends
// the process abnormally, which fails the test; before each input its name is printed, so the log names the
// culprit.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [REGRESSION_DIR...]\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t total = 0;
  for (int a = 1; a < argc; ++a) {
    const fs::path dir = argv[a];
    std::vector<fs::path> files;
    std::error_code ec;
    if (fs::is_directory(dir, ec)) {
      for (const auto& entry : fs::directory_iterator(dir))
        if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    if (a == 1 && files.empty()) {
      std::fprintf(stderr, "replay: the seed corpus %s has no files\n", dir.c_str());
      return 1;
    }
    for (const fs::path& file : files) {
      std::ifstream in(file, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::printf("replay %s (%zu bytes)\n", file.c_str(), bytes.size());
      std::fflush(stdout);
      // As libFuzzer does, an empty input still comes with a valid pointer (an empty vector's data() is null).
      static const uint8_t kNothing = 0;
      LLVMFuzzerTestOneInput(bytes.empty() ? &kNothing : reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("replay: %zu input(s) from %s\n", files.size(), dir.c_str());
    total += files.size();
  }
  std::printf("replay: %zu input(s), all passed\n", total);
  return 0;
}
