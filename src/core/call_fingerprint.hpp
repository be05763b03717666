// What a call's fingerprint (transport/fingerprint.hpp) holds, and how a mismatch is put in words.
//
// The planner numbers every call as it plans it: collectives with one counter per communicator (every rank makes
// the same collective calls, internal ones included: the barrier at init, calibration, split), Send/Recv with one
// counter per peer and direction (only the two ranks of a pair take part). Numbers start again at 0 with the
// user's first call (Planner::setRecorder), as the flight recorder's do. Each job's sends carry its call's
// fingerprint and its receives expect the sender's: the same one for a collective; for a Recv from rank p, the
// fingerprint of p's matching Send to this rank, since a send/receive pair is written in the sender's terms.
//
// Fingerprint layout: call = the number; root = for Send/Recv the receiving rank + 1, for a collective root + 1
// (Broadcast, Reduce; else 0) in bits 0-27 and the algorithm that runs it + 1 in bits 28-31 (ranks whose tuners or
// COLLIE_ALGO chose differently would exchange messages of another schedule that pass every other check: the
// results would be wrong); shape = count (bits 0-39, saturated) | communicator tag (40-51: 0, or a child's that
// shares its parent's connections, link_share.hpp) | collective + 1, or 9 for barrier()'s AllReduce (52-55) | data
// type (56-59) | op + 1 (60-63; reductions only). Any 16 bytes decode to some description, so a fingerprint from a
// broken peer cannot crash the report.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/op_desc.hpp"
#include "transport/fingerprint.hpp"

namespace collie::core {

/// The fingerprint of `op` on `rank`, numbered `call`, of the communicator tagged `tag` (kMaxCommTag at most), run by
/// `algorithm` (an algorithms::Algorithm; -1: none given). For a Recv it is the one the sender's Send carries.
constexpr uint32_t kMaxCommTag = 4095;
transport::Fingerprint fingerprintOf(const OpDesc& op, uint32_t call, int rank, uint32_t tag = 0, int algorithm = -1);

/// The call of `fp` made on `rank`, in words: "AllReduce(float32, sum, 1024) as call #17"; for a send/receive
/// fingerprint "Recv(int32, 8 from rank 2) as receive #3 from rank 2" (`other`: the rank at the other end).
std::string callText(const transport::Fingerprint& fp, int rank, int other);
/// "rank R called " + callText().
std::string describeCall(const transport::Fingerprint& fp, int rank, int other);

/// "rank 0 called ...; rank 1 called ..." (lower rank first, so that both ranks of a link say the same), and what
/// the rule is.
std::string describeMismatch(const transport::MismatchRecord& r);

/// This rank's recent collective fingerprints, to name the call of a stale message from a peer that called
/// something else one or more calls ago.
class CallHistory {
 public:
  void add(const transport::Fingerprint& fp) { ring_[fp.call % ring_.size()] = fp; }
  /// The fingerprint of collective call `call`, or nullptr when it is not (or no longer) known.
  const transport::Fingerprint* find(uint32_t call) const {
    const transport::Fingerprint& f = ring_[call % ring_.size()];
    return f.shape != 0 && f.call == call ? &f : nullptr;
  }

 private:
  std::array<transport::Fingerprint, 64> ring_{};
};

/// Whether `fp` is a send's to `rank` (what a receive from any source on `rank` can take).
bool isSendTo(const transport::Fingerprint& fp, int rank);

/// The communicator tag of `fp` (0, or a sharing child's: link_share.hpp).
uint32_t communicatorTag(const transport::Fingerprint& fp);

/// Whether `fp` is a collective's (not a send/receive's, not empty).
bool isCollectiveFingerprint(const transport::Fingerprint& fp);

/// Whether a peer's message of `theirs` shows that it made this rank's collective call `mine` differently: both
/// collective calls of one communicator (its tag) with the same number, and different.
bool contradicts(const transport::Fingerprint& theirs, const transport::Fingerprint& mine);

}  // namespace collie::core
