// Fuzzes the checks a TCP hello goes through when it reaches a rank (the first 56 bytes on any connection to its
// listener, from anyone): handshake::headerAuthentic and dialerValid (the accept path's), then
// tcp::checkHelloConfig (the transport's). The receiver is rank 1 of 4 with 2 sockets per peer; the input fills
// the Hello (zero-padded or cut to its size). Each check runs on every input, whatever the one before said: each
// must cope with any bytes. Invariant: an authentic hello is one addressed to this rank with the right magic.
#include <algorithm>
#include <cstring>

#include "base/errors.hpp"
#include "fuzz_check.hpp"
#include "transport/handshake.hpp"
#include "transport/tcp/tcp_hello.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  using namespace collie::transport;
  constexpr int kRank = 1, kNranks = 4, kSockets = 2;
  constexpr int64_t kStripeMin = 262144;
  static const uint8_t kSecret[16] = {0x5e, 0xc7, 0xe7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  tcp::Hello h{};
  std::memcpy(&h, data, std::min(size, sizeof(h)));
  bool authentic = handshake::headerAuthentic(h.header, TransportKind::Tcp, kRank, kSecret);
  if (authentic)
    FUZZ_CHECK(h.header.magic == handshake::kMagic && h.header.toRank == kRank &&
               std::memcmp(h.header.secret, kSecret, sizeof(kSecret)) == 0);
  bool sender = handshake::dialerValid(h.header, kRank, kNranks, kSockets);
  if (sender)
    FUZZ_CHECK(h.header.fromRank >= 0 && h.header.fromRank != kRank && h.header.fromRank < kNranks &&
               h.header.channel >= 0 && h.header.channel < kSockets);
  try {
    tcp::checkHelloConfig(h, kRank, kSockets, kStripeMin);
    FUZZ_CHECK(h.nsock == kSockets && h.stripeMinBytes == kStripeMin && h.header.type == tcp::kHelloType);
  } catch (const Error&) {
  }
  return 0;
}
