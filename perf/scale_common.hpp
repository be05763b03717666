// Helpers shared by the scale benchmarks (init_scale, split_scale): descriptors and memory of this process, the
// --ranks list, the environment's header line, seconds. They read /proc, as a user would, rather than collie's
// internals.
#pragma once

#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace collie_perf {

/// Descriptors open in this process (-1 when /proc cannot be read).
inline int openDescriptors() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

/// This process's resident memory in MiB (VmRSS; -1 when unknown).
inline double residentMiB() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double kib = -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atof(line + 6);
  fclose(f);
  return kib / 1024.0;
}

/// "8,32,128" -> {8, 32, 128}.
inline std::vector<int> parseList(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

/// What the run's environment chose, for the header line: the transport (COLLIE_SHM_DISABLE) and COLLIE_CONNECT.
inline void printEnvironment() {
  const char* shm = getenv("COLLIE_SHM_DISABLE");
  const char* connect = getenv("COLLIE_CONNECT");
  printf("# transport: %s; COLLIE_CONNECT=%s", shm && strcmp(shm, "1") == 0 ? "tcp (COLLIE_SHM_DISABLE=1)" : "shm",
         connect ? connect : "(default)");
}

inline double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace collie_perf
