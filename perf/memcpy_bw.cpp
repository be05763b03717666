/*
 * memcpy_bw.cpp: single-thread memcpy bandwidth of this machine, the ceiling to put beside the collective numbers
 * in RESULTS.md (a shared-memory transport moves each byte with at least one copy).
 *
 * For each size (1 MiB: cache-resident; 16 MiB: about last-level cache; 128 MiB: DRAM) it copies one buffer into
 * another repeatedly, best of several runs, and reports
 *   copy GB/s = bytes copied / time     (each byte counted once, as algbw counts a collective's bytes)
 *   r+w  GB/s = 2 * copy GB/s           (memory traffic: every byte is read once and written once)
 * with GB = 1e9 bytes, as nccl-tests does. Usage: memcpy_bw [runs] (default 7). Rows are "size copy r+w".
 */
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const size_t sizes[] = {size_t{1} << 20, size_t{16} << 20, size_t{128} << 20};
  std::printf("# memcpy_bw: single-thread memcpy, best of %d runs, GB = 1e9 B\n", runs);
  std::printf("# %10s  %10s  %10s\n", "size (B)", "copy GB/s", "r+w GB/s");
  for (const size_t size : sizes) {
    char* src = static_cast<char*>(std::aligned_alloc(4096, size));
    char* dst = static_cast<char*>(std::aligned_alloc(4096, size));
    if (!src || !dst) {
      std::fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", size);
      return 1;
    }
    std::memset(src, 1, size);  // fault every page in before timing
    std::memset(dst, 2, size);
    const int reps = static_cast<int>(std::max<size_t>(1, (size_t{512} << 20) / size));  // ~512 MiB per run
    double best = 1e30;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) {
        std::memcpy(dst, src, size);
        asm volatile("" ::: "memory");  // the copy must happen every time
      }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double copy = static_cast<double>(size) * reps / best / 1e9;
    std::printf("  %10zu  %10.2f  %10.2f\n", size, copy, 2 * copy);
    if (dst[size - 1] != 1) return 1;
    std::free(src);
    std::free(dst);
  }
  return 0;
}
