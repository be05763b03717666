// The shm transport's handshake messages (shm_transport.cpp): Hello carries a rank's ring geometry, its identity
// (pid and process token), a probe word to try process_vm_readv on, and over SCM_RIGHTS the fds of its ring,
// control line and eventfd; Ack says whether the receiver can read the sender's memory. checkHello is a pure
// function of the received message and fd count, so that the fuzzer (tests/fuzz/fuzz_shm_hello.cpp) runs it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/handshake.hpp"

namespace collie::transport::shm {

enum MsgType : uint32_t { kHello = 1, kAck = 2 };
constexpr int kMaxFds = 3;  // ring, control, eventfd

struct Msg {
  handshake::Header header;
  int32_t pid;  ///< the sender's own view (for messages only)
  uint32_t nfds;
  uint64_t token;  ///< equal tokens (and pids): the same process
  uint64_t probeAddr;
  uint64_t probeValue;
  uint64_t ringBytes;
  uint32_t slots;
  uint32_t slotBytes;
  uint32_t canReadYou;  ///< kAck
  uint32_t pad;
};

/// Checks a verified Hello from rank `peer` that came with `fdsReceived` descriptors: its type, fd count (2 or 3,
/// as many as received), ring geometry (slots a power of two, slotBytes a positive multiple of 64) and ring size
/// (what ringBytes() gives for that geometry). Throws InternalError naming both ranks and the bad field.
void checkHello(const Msg& m, size_t fdsReceived, int rank, int peer);

}  // namespace collie::transport::shm
