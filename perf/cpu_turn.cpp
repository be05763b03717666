/*
 * cpu_turn.cpp: what a rank woken on a CPU that another rank shares waits for that rank's turn, the constant behind
 * the tuner's CostModel::queuedWake (kWakeSeconds in src/core/tuner.hpp).
 *
 * Two processes pinned to one CPU pass a byte back and forth over two pipes; each round trip switches the CPU from
 * one to the other and back. It prints the time per round trip (two switches, each with a wake-up): what each other
 * rank of its CPU costs a rank woken by a message, once in and once out. Usage: cpu_turn [round trips] (default
 * 200000) [cpu] (default 0).
 */
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

bool pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

bool pass(int in, int out, bool first) {  // one leg of a round trip: write then read, or read then write
  char byte = 0;
  if (first) return write(out, &byte, 1) == 1 && read(in, &byte, 1) == 1;
  return read(in, &byte, 1) == 1 && write(out, &byte, 1) == 1;
}

}  // namespace

int main(int argc, char** argv) {
  const long trips = argc > 1 ? std::max(1L, std::atol(argv[1])) : 200000;
  const int cpu = argc > 2 ? std::atoi(argv[2]) : 0;
  int there[2], back[2];
  if (pipe(there) != 0 || pipe(back) != 0 || !pinTo(cpu)) {
    std::perror("cpu_turn: pipe or sched_setaffinity");
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) {
    std::perror("cpu_turn: fork");
    return 1;
  }
  if (child == 0) {  // inherits the pinning
    for (long i = 0; i < trips; ++i)
      if (!pass(there[0], back[1], false)) _exit(1);
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  bool ok = true;
  for (long i = 0; i < trips && ok; ++i) ok = pass(back[0], there[1], true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int status = 0;
  waitpid(child, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "cpu_turn: a pipe failed\n");
    return 1;
  }
  std::printf("cpu %d: %ld round trips, %.2f us per round trip (two switches), %.2f us per switch\n", cpu, trips,
              seconds / trips * 1e6, seconds / trips * 1e6 / 2);
  return 0;
}
