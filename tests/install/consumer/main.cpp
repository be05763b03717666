// The C++ API from an installed collie.
#include <collie/collie.hpp>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
  auto comms = collie::Communicator::createAll(2);
  std::vector<std::thread> threads;
  std::vector<int> ok(2, 0);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int32_t> v{r, 10 * r};
      comms[static_cast<size_t>(r)]->allReduce(std::span<int32_t>(v), collie::ReduceOp::Sum);
      ok[static_cast<size_t>(r)] = v[0] == 1 && v[1] == 10;
    });
  }
  for (auto& t : threads) t.join();
  std::printf("consumer_cxx %s (collie %s)\n", ok[0] && ok[1] ? "ok" : "WRONG", collie::versionString());
  return ok[0] && ok[1] ? 0 : 1;
}
