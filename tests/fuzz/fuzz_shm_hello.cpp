// Fuzzes the checks an shm hello goes through (the first message on the shm listener's unix socket, from any
// local process): handshake::headerAuthentic and dialerValid, then shm::checkHello (type, fd count, ring
// geometry and size). The first input byte says how many fds came with the message (0..3); the rest fills the
// Msg (zero-padded or cut to its size). Invariant: a hello checkHello accepts has a geometry whose ring size is
// what ringBytes gives, with 2 or 3 fds.
#include <algorithm>
#include <cstring>

#include "base/errors.hpp"
#include "fuzz_check.hpp"
#include "transport/handshake.hpp"
#include "transport/shm/shm_hello.hpp"
#include "transport/shm/shm_segment.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  using namespace collie::transport;
  constexpr int kRank = 0, kNranks = 3;
  static const uint8_t kSecret[16] = {0x5e, 0xc7, 0xe7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  if (size == 0) return 0;
  const size_t fdsReceived = data[0] % (shm::kMaxFds + 1);
  shm::Msg m{};
  std::memcpy(&m, data + 1, std::min(size - 1, sizeof(m)));
  (void)handshake::headerAuthentic(m.header, TransportKind::Shm, kRank, kSecret);
  (void)handshake::dialerValid(m.header, kRank, kNranks, 1);
  try {
    shm::checkHello(m, fdsReceived, kRank, std::max(m.header.fromRank, 1));
  } catch (const Error&) {
    return 0;
  }
  FUZZ_CHECK(m.header.type == shm::kHello && (m.nfds == 2 || m.nfds == 3) && m.nfds == fdsReceived);
  FUZZ_CHECK(m.slots > 0 && m.slotBytes > 0 && m.ringBytes == shm::ringBytes(m.slots, m.slotBytes));
  return 0;
}
