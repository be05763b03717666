// collie-info: what this build of collie is and how it is configured: the version, the optional parts built
// in (and the host reduction kernels this CPU runs), and every COLLIE_* parameter with its default and current
// value.
//
//   collie-info             everything
//   collie-info --params    the parameter table only
//   collie-info --version   the version only
//
// Each section is one entry of kSections; a new one (--topo, --tuner, ...) is a new entry and a function.
#include <collie/config.h>

#include <algorithm>
#include <collie/collie.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/datatypes.hpp"
#include "core/params.hpp"

namespace {

void printVersion() { std::printf("collie %s\n", COLLIE_VERSION_STRING); }

void printBuild() {
  struct Option {
    const char* name;
    int on;
  };
  const Option options[] = {{"COLLIE_WITH_CUDA", COLLIE_WITH_CUDA},
                            {"COLLIE_WITH_IBVERBS", COLLIE_WITH_IBVERBS},
                            {"COLLIE_WITH_HWLOC", COLLIE_WITH_HWLOC},
                            {"COLLIE_WITH_TORCH", COLLIE_WITH_TORCH}};
  std::printf("Build options:\n");
  for (const Option& o : options) std::printf("  %-20s %s\n", o.name, o.on ? "ON" : "OFF");
  std::printf("  %-20s %s\n", "host kernels", collie::core::kernelIsaName(collie::core::kernelIsa()));
}

std::string shown(const std::string& value) { return value.empty() ? "(empty)" : value; }

void printParams() {
  std::vector<collie::core::params::ParamInfo> rows = collie::core::params::all();
  const char* headers[] = {"Parameter", "Type", "Default", "Value"};
  size_t widths[4];
  for (int c = 0; c < 4; ++c) widths[c] = std::strlen(headers[c]);
  for (const auto& r : rows) {
    widths[0] = std::max(widths[0], std::strlen(r.env));
    widths[1] = std::max(widths[1], std::strlen(r.type));
    widths[2] = std::max(widths[2], shown(r.defaultValue).size());
    widths[3] = std::max(widths[3], shown(r.value).size() + 2);  // room for the " *" mark
  }
  auto w = [&](int c) { return static_cast<int>(widths[c]); };
  std::printf("Parameters (* = set from the environment):\n");
  std::printf("  %-*s  %-*s  %-*s  %-*s  %s\n", w(0), headers[0], w(1), headers[1], w(2), headers[2], w(3), headers[3],
              "Description");
  for (const auto& r : rows) {
    std::string value = shown(r.value) + (r.fromEnv ? " *" : "");
    std::printf("  %-*s  %-*s  %-*s  %-*s  %s\n", w(0), r.env, w(1), r.type, w(2), shown(r.defaultValue).c_str(), w(3),
                value.c_str(), r.description);
  }
}

void printAll() {
  printVersion();
  std::printf("\n");
  printBuild();
  std::printf("\n");
  printParams();
}

struct Section {
  const char* flag;
  const char* help;
  void (*print)();
};

const Section kSections[] = {
    {"--version", "print the version only", printVersion},
    {"--params", "print the COLLIE_* parameters only: default, current value, description", printParams},
};

void usage(FILE* out, const char* prog) {
  std::fprintf(out, "Usage: %s [option]...\n", prog);
  std::fprintf(out, "Prints the version, the build options and every COLLIE_* parameter of collie.\n\n");
  std::fprintf(out, "  %-12s %s\n", "--help", "print this help");
  for (const Section& s : kSections) std::fprintf(out, "  %-12s %s\n", s.flag, s.help);
  std::fprintf(out, "\nWith no option, prints everything. Several options print their sections in order.\n");
}

}  // namespace

int main(int argc, char** argv) {
  const char* prog = argc > 0 ? argv[0] : "collie-info";
  std::vector<const Section*> chosen;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      usage(stdout, prog);
      return 0;
    }
    const Section* match = nullptr;
    for (const Section& s : kSections) {
      if (std::strcmp(argv[i], s.flag) == 0) match = &s;
    }
    if (match == nullptr) {
      std::fprintf(stderr, "%s: unknown option '%s'\n\n", prog, argv[i]);
      usage(stderr, prog);
      return 2;
    }
    chosen.push_back(match);
  }
  try {
    if (chosen.empty()) {
      printAll();
    } else {
      for (size_t i = 0; i < chosen.size(); ++i) {
        if (i > 0) std::printf("\n");
        chosen[i]->print();
      }
    }
  } catch (const collie::Error& e) {
    // A malformed COLLIE_* value (e.g. COLLIE_TIMEOUT=abc) is reported, not shown as if it were valid.
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 1;
  }
  return 0;
}
