// Call fingerprints: how the two ends of a link find out that their ranks made different calls.
//
// Core computes one Fingerprint per call (src/core/call_fingerprint.hpp: the call's number, collective, type,
// op, count, root or peer) and puts it in every Transfer: a send carries its call's fingerprint, a receive the
// fingerprint it expects from the sender. Each transport carries the sender's fingerprint in its per-message
// header (tcp: MsgHeader, shm: SlotHeader, self: the Transfer itself) and the receiver compares it with the one
// it posted: two 64-bit compares. To a transport a fingerprint is 16 opaque bytes; equal means matching calls.
//
// On a difference the receiver throws MismatchError, carrying a MismatchRecord (which rank called what). Core
// turns the record into words ("rank 0 called AllReduce(float32, sum, 1024) as call #17; rank 1 called ..."),
// fails the communicator and poisons its connections with the record (Connection::poison): a transport passes
// the record to the peer where it can (tcp: a poison header after the last whole message; shm: the closed
// lines), and a peer that finds one throws the same MismatchError, so every rank reports the same mismatch.
#pragma once

#include <atomic>
#include <collie/collie.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace collie::transport {

/// One call as its ranks must agree on it (layout owned by core; 16 bytes on the wire).
struct Fingerprint {
  uint32_t call = 0;   ///< the call's number (per communicator, or per peer and direction for send/receive)
  uint32_t root = 0;   ///< root + 1, receiving rank + 1 for send/receive, 0 when neither applies
  uint64_t shape = 0;  ///< count and collective, type and op codes (core/call_fingerprint.hpp); 0: none
  bool operator==(const Fingerprint& o) const { return call == o.call && root == o.root && shape == o.shape; }
  bool operator!=(const Fingerprint& o) const { return !(*this == o); }
};
static_assert(sizeof(Fingerprint) == 16);

/// The last collective call a communicator (or a sharing family) made: published by core's planner at each call,
/// read on the accept loop's thread when a peer asks what this rank waits in (handshake::Dialer). A sequence lock:
/// neither side waits; a read torn by a publish is tried again. One writer at a time.
class LastCall {
 public:
  void publish(const Fingerprint& fp) noexcept {
    const uint32_t s = seq_.load(std::memory_order_relaxed);
    seq_.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    head_.store(uint64_t{fp.call} | uint64_t{fp.root} << 32, std::memory_order_relaxed);
    shape_.store(fp.shape, std::memory_order_relaxed);
    seq_.store(s + 2, std::memory_order_release);
  }
  /// The last call published; nullopt when none was (or every try was torn).
  std::optional<Fingerprint> read() const noexcept {
    for (int tries = 0; tries < 16; ++tries) {
      const uint32_t before = seq_.load(std::memory_order_acquire);
      if (before & 1u) continue;
      const uint64_t head = head_.load(std::memory_order_relaxed);
      const uint64_t shape = shape_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq_.load(std::memory_order_relaxed) != before) continue;
      if (before == 0) return std::nullopt;
      return Fingerprint{static_cast<uint32_t>(head), static_cast<uint32_t>(head >> 32), shape};
    }
    return std::nullopt;
  }

 private:
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint64_t> head_{0};  // call | root << 32
  std::atomic<uint64_t> shape_{0};
};

/// What a peer tells a rank that asks which calls it waits in (Transport::askWaitingCalls).
struct ToldCalls {
  std::vector<Fingerprint> waiting;  ///< the collective calls its run waits in
  std::optional<Fingerprint> last;   ///< the last collective call it made there (LastCall), if it says
};

/// Two ranks that made different calls: rankA called `a`, rankB called `b`.
struct MismatchRecord {
  int32_t rankA = -1;
  int32_t rankB = -1;
  Fingerprint a;
  Fingerprint b;
};
static_assert(sizeof(MismatchRecord) == 40);

/// Thrown by a transport when a message's fingerprint differs from the posted receive's, or when the peer passed
/// on a mismatch it knows of. Code InvalidUsage (the caller's ranks disagree; collie is not at fault).
class MismatchError : public Error {
 public:
  MismatchError(const MismatchRecord& record, const std::string& message)
      : Error(ErrorCode::InvalidUsage, message), record_(record) {}
  const MismatchRecord& record() const { return record_; }

 private:
  MismatchRecord record_;
};

/// Throws MismatchError for `record` with a plain message (core rewrites it in words): `where` says how the
/// transport learnt of it ("over tcp from peer 3", ...).
[[noreturn]] void throwMismatch(const MismatchRecord& record, const char* where);

}  // namespace collie::transport
