// first_contact: a rank that makes its first call only when told, for the test bed's case "unconnected"
// (run_testbed_tests.sh). Creates its communicator from the launcher's environment (connections on first use: init
// leaves a rank connected to a few peers only), prints
//   first_contact: rank R of N initialised, connected to K peer(s)
// waits until the file named by its one argument exists (60 s at most), then runs an AllToAll of 1024 int32 per
// peer, which needs every peer, and checks every element. Exit 0 and "first_contact ok: rank R of N" when it all
// worked; 1 with collie's error on stderr when a call failed; 2 on a usage error or when the file never came.
#include <unistd.h>

#include <chrono>
#include <collie/collie.hpp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: first_contact GO_FILE\n");
    return 2;
  }
  int rank = -1;
  try {
    auto comm = collie::Communicator::createFromEnv();
    rank = comm->rank();
    const int n = comm->size();
    std::printf("first_contact: rank %d of %d initialised, connected to %d peer(s)\n", rank, n, comm->connectedPeers());
    std::fflush(stdout);
    const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::access(argv[1], F_OK) != 0) {
      if (std::chrono::steady_clock::now() > giveUp) {
        std::fprintf(stderr, "first_contact: rank %d: %s never appeared\n", rank, argv[1]);
        return 2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    constexpr int kPerPeer = 1024;
    std::vector<int32_t> send(static_cast<size_t>(kPerPeer) * n), recv(send.size(), -1);
    for (size_t i = 0; i < send.size(); ++i) send[i] = rank * 1000003 + static_cast<int32_t>(i);
    comm->allToAll(send.data(), recv.data(), kPerPeer, collie::DataType::Int32);
    int bad = 0;
    for (int p = 0; p < n; ++p)
      for (int i = 0; i < kPerPeer; ++i)
        bad += recv[static_cast<size_t>(p) * kPerPeer + i] != p * 1000003 + rank * kPerPeer + i;
    if (bad) {
      std::fprintf(stderr, "first_contact: rank %d: %d wrong elements\n", rank, bad);
      return 1;
    }
    std::printf("first_contact ok: rank %d of %d\n", rank, n);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "first_contact: rank %d: failed: %s\n", rank, e.what());
    return 1;
  }
}
