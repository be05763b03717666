// The shm Hello's checks (see shm_hello.hpp).
#include "transport/shm/shm_hello.hpp"

#include "base/errors.hpp"
#include "transport/shm/shm_segment.hpp"

namespace collie::transport::shm {

void checkHello(const Msg& m, size_t fdsReceived, int rank, int peer) {
  auto fail = [&](const char* what) {
    COLLIE_FAIL(ErrorCode::InternalError,
                "shm connect of rank %d: rank %d sent a malformed hello (%s: type %u, %u fds of %zu received, %u "
                "slots of %u bytes, ring %llu bytes)",
                rank, peer, what, m.header.type, m.nfds, fdsReceived, m.slots, m.slotBytes,
                static_cast<unsigned long long>(m.ringBytes));
  };
  if (m.header.type != kHello) fail("not a hello");
  if (m.nfds < 2 || m.nfds > kMaxFds || fdsReceived != m.nfds) fail("fd count");
  if (m.slots < 1 || (m.slots & (m.slots - 1)) != 0) fail("slots not a power of two");
  if (m.slotBytes == 0 || m.slotBytes % 64 != 0) fail("slot bytes not a positive multiple of 64");
  if (m.ringBytes != ringBytes(m.slots, m.slotBytes)) fail("ring size");
}

}  // namespace collie::transport::shm
