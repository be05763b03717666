// The TCP hello's checks (see tcp_hello.hpp).
#include "transport/tcp/tcp_hello.hpp"

#include "base/errors.hpp"

namespace collie::transport::tcp {

void checkHelloConfig(const Hello& h, int rank, int nsock, int64_t stripeMinBytes) {
  COLLIE_USAGE_CHECK(h.header.type == kHelloType,
                     "tcp: rank %d sent a handshake message of type %u where a hello (type %u) was due to rank %d",
                     h.header.fromRank, h.header.type, kHelloType, rank);
  COLLIE_USAGE_CHECK(h.nsock == nsock && h.stripeMinBytes == stripeMinBytes,
                     "tcp: rank %d uses %d sockets per peer and stripes from %lld bytes but rank %d uses %d and "
                     "%lld; COLLIE_SOCKETS_PER_PEER and COLLIE_STRIPE_MIN_BYTES must be equal on all ranks",
                     h.header.fromRank, h.nsock, static_cast<long long>(h.stripeMinBytes), rank, nsock,
                     static_cast<long long>(stripeMinBytes));
}

}  // namespace collie::transport::tcp
