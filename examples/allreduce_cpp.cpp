// allreduce_cpp: the C++ API in one complete program. One process per rank, started by a launcher:
//
//   collierun -n 4 ./allreduce_cpp
//
// runs ONE 4-rank job (Communicator::createFromEnv reads collierun's, torchrun's, Open MPI's or Slurm's
// variables). Every rank fills a vector with rank + 1, runs a blocking AllReduce (Sum), then an async one
// (allReduceAsync + wait, the way to overlap other work), checks every element and prints
//   allreduce_cpp: rank R of N: sum X, async sum Y: ok
// A failure (collie::Error) is printed on stderr and the exit code is 1.
#include <collie/collie.hpp>
#include <cstdio>
#include <exception>
#include <span>
#include <vector>

int main() {
  try {
    auto comm = collie::Communicator::createFromEnv();
    const int rank = comm->rank(), n = comm->size();

    std::vector<float> v(1 << 16, static_cast<float>(rank + 1));
    comm->allReduce(std::span<float>(v), collie::ReduceOp::Sum);

    std::vector<double> w(1000, 2.0 * rank);
    collie::Work work = comm->allReduceAsync(std::span<double>(w), collie::ReduceOp::Sum);
    // ... other work could run here while the collective proceeds ...
    work.wait();  // throws collie::Error if the collective failed

    const float want = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
    const double wantAsync = static_cast<double>(n) * (n - 1);
    bool ok = true;
    for (float x : v) ok = ok && x == want;
    for (double x : w) ok = ok && x == wantAsync;
    std::printf("allreduce_cpp: rank %d of %d: sum %g, async sum %g: %s\n", rank, n, static_cast<double>(v[0]), w[0],
                ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_cpp: %s\n", e.what());
    return 1;
  }
}
