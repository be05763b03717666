// The header that precedes every message part on a tcp connection, and the one function that checks a received
// header against what the receiver posted (pure: no socket, so a fuzz harness can feed it any bytes).
//
// Wire layout (48 bytes, host byte order: both ends run the same build on the same architecture):
//   data header   {kMsgMagic,    message number, whole-message bytes, sender's call fingerprint, zeros}
//   poison header {kPoisonMagic, rank A,         rank B,              A's call,                  B's call}
// A poison header is written by a rank that found a call mismatch (transport/fingerprint.hpp), after its last
// whole message part and before it closes the socket; the receiver reports that mismatch instead of "peer closed".
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/fingerprint.hpp"

namespace collie::transport::tcp {

struct MsgHeader {
  uint32_t magic;   ///< kMsgMagic or kPoisonMagic
  uint32_t seq;     ///< data: the message's number on this connection (per direction); poison: rank A
  uint64_t bytes;   ///< data: size of the whole message, not of this part; poison: rank B
  Fingerprint fp;   ///< data: the sender's call; poison: rank A's call
  Fingerprint fp2;  ///< data: zero; poison: rank B's call
};
static_assert(sizeof(MsgHeader) == 48);

constexpr uint32_t kMsgMagic = 0x434c4d48;     // "CLMH" (was "CLMG" with the 16-byte header)
constexpr uint32_t kPoisonMagic = 0x434c4d50;  // "CLMP"

/// What the receiver posted for the part whose header arrived.
struct ExpectedMsg {
  uint32_t seq = 0;    ///< message number
  uint64_t bytes = 0;  ///< whole-message bytes
  Fingerprint fp;      ///< the sender's call must have this fingerprint
};

MsgHeader dataHeader(uint32_t seq, uint64_t bytes, const Fingerprint& fp);
MsgHeader poisonHeader(const MismatchRecord& why);

/// Copies a header out of `n` received bytes; fails with InternalError when n is not sizeof(MsgHeader).
MsgHeader decodeMsgHeader(const void* data, size_t n);

/// Checks header `h` from `peer` against `expected`, in this order:
///   poison header                -> MismatchError with the record it carries;
///   bad magic                    -> Error(InternalError) "corrupt tcp stream";
///   fingerprint differs          -> MismatchError {rank A = peer: h.fp, rank B = `rank`: expected.fp};
///   whole-message size differs   -> Error(InternalError) (same call, different sizes: a collie bug);
///   message number differs       -> Error(InternalError).
/// Returns normally when the header matches.
void checkMsgHeader(const MsgHeader& h, const ExpectedMsg& expected, int rank, int peer);

/// The poison record in `h` (kPoisonMagic), with ranks outside int32 clamped to -1.
MismatchRecord poisonRecord(const MsgHeader& h);

}  // namespace collie::transport::tcp
