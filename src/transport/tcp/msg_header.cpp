// The tcp message header: building, decoding and checking (see msg_header.hpp).
#include "transport/tcp/msg_header.hpp"

#include <cstring>

#include "base/errors.hpp"

namespace collie::transport::tcp {

MsgHeader dataHeader(uint32_t seq, uint64_t bytes, const Fingerprint& fp) {
  return MsgHeader{kMsgMagic, seq, bytes, fp, Fingerprint{}};
}

MsgHeader poisonHeader(const MismatchRecord& why) {
  return MsgHeader{kPoisonMagic, static_cast<uint32_t>(why.rankA),
                   static_cast<uint64_t>(static_cast<uint32_t>(why.rankB)), why.a, why.b};
}

MsgHeader decodeMsgHeader(const void* data, size_t n) {
  COLLIE_INTERNAL_CHECK(data != nullptr && n == sizeof(MsgHeader), "tcp message header of %zu bytes (expected %zu)", n,
                        sizeof(MsgHeader));
  MsgHeader h;
  std::memcpy(&h, data, sizeof(h));
  return h;
}

MismatchRecord poisonRecord(const MsgHeader& h) {
  MismatchRecord r;
  r.rankA = static_cast<int32_t>(h.seq);
  r.rankB = h.bytes <= UINT32_MAX ? static_cast<int32_t>(static_cast<uint32_t>(h.bytes)) : -1;
  r.a = h.fp;
  r.b = h.fp2;
  return r;
}

void checkMsgHeader(const MsgHeader& h, const ExpectedMsg& expected, int rank, int peer) {
  if (h.magic == kPoisonMagic) throwMismatch(poisonRecord(h), base::format("from peer %d over tcp", peer).c_str());
  if (h.magic != kMsgMagic) {
    COLLIE_FAIL(ErrorCode::InternalError,
                "corrupt tcp stream from peer %d: bad message magic 0x%08x (expected message #%u of %llu bytes)", peer,
                h.magic, expected.seq, static_cast<unsigned long long>(expected.bytes));
  }
  if (h.fp != expected.fp) {
    MismatchRecord r;
    r.rankA = peer;
    r.a = h.fp;
    r.rankB = rank;
    r.b = expected.fp;
    throwMismatch(r, base::format("from peer %d over tcp", peer).c_str());
  }
  if (h.bytes != expected.bytes) {
    COLLIE_FAIL(ErrorCode::InternalError, "message size mismatch from peer %d: expected %llu got %llu", peer,
                static_cast<unsigned long long>(expected.bytes), static_cast<unsigned long long>(h.bytes));
  }
  if (h.seq != expected.seq) {
    COLLIE_FAIL(ErrorCode::InternalError, "message order mismatch from peer %d: expected message #%u got #%u", peer,
                expected.seq, h.seq);
  }
}

}  // namespace collie::transport::tcp
