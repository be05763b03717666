// The TCP transport's hello: the first message on every socket, in both directions (tcp_transport.cpp's
// handshake). It carries the common handshake Header and the two settings both ends of a pair must share: the
// socket count (COLLIE_SOCKETS_PER_PEER) and the striping threshold (COLLIE_STRIPE_MIN_BYTES). Its checks are
// pure functions of the received bytes, so that the fuzzer (tests/fuzz/fuzz_tcp_hello.cpp) runs exactly them.
#pragma once

#include <cstdint>

#include "transport/handshake.hpp"

namespace collie::transport::tcp {

constexpr uint32_t kHelloType = 1;

struct Hello {
  handshake::Header header;
  int32_t nsock;
  int32_t pad;
  int64_t stripeMinBytes;
};
static_assert(sizeof(Hello) == 56);

/// Checks that a verified hello is a hello and that its sender shares this rank's settings; throws InvalidUsage
/// naming both ranks' values when not (COLLIE_SOCKETS_PER_PEER and COLLIE_STRIPE_MIN_BYTES must be equal).
void checkHelloConfig(const Hello& h, int rank, int nsock, int64_t stripeMinBytes);

}  // namespace collie::transport::tcp
