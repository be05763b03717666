// Fuzzes the check of every TCP message header a rank receives (transport::tcp::decodeMsgHeader and
// checkMsgHeader: 48 bytes from the peer before each message part, data or poison), and the words a mismatch is
// reported in (core::describeMismatch over the fingerprints the peer sent, any 16 bytes). Input: the 48 header
// bytes, then what this rank posted (message number u32, whole-message bytes u64, fingerprint 16 bytes;
// zero-padded). Invariants: a header that passes is a data header for exactly what was posted; a poison header
// reports the record it carries; every mismatch can be put in words.
#include <algorithm>
#include <cstring>

#include "base/errors.hpp"
#include "core/call_fingerprint.hpp"
#include "fuzz_check.hpp"
#include "transport/fingerprint.hpp"
#include "transport/tcp/msg_header.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  using namespace collie::transport;
  constexpr int kRank = 1, kPeer = 0;
  try {
    tcp::decodeMsgHeader(data, size);  // the size check: only an exact header decodes
    FUZZ_CHECK(size == sizeof(tcp::MsgHeader));
  } catch (const Error&) {
    FUZZ_CHECK(size != sizeof(tcp::MsgHeader));
  }
  uint8_t bytes[sizeof(tcp::MsgHeader) + 4 + 8 + sizeof(Fingerprint)] = {};
  std::memcpy(bytes, data, std::min(size, sizeof(bytes)));
  const tcp::MsgHeader h = tcp::decodeMsgHeader(bytes, sizeof(tcp::MsgHeader));
  tcp::ExpectedMsg expected;
  const uint8_t* e = bytes + sizeof(tcp::MsgHeader);
  std::memcpy(&expected.seq, e, 4);
  std::memcpy(&expected.bytes, e + 4, 8);
  std::memcpy(&expected.fp, e + 12, sizeof(Fingerprint));
  try {
    tcp::checkMsgHeader(h, expected, kRank, kPeer);
    FUZZ_CHECK(h.magic == tcp::kMsgMagic && h.fp == expected.fp && h.bytes == expected.bytes && h.seq == expected.seq);
  } catch (const MismatchError& m) {
    FUZZ_CHECK(m.code() == ErrorCode::InvalidUsage);
    if (h.magic == tcp::kPoisonMagic) {
      const MismatchRecord r = tcp::poisonRecord(h);
      FUZZ_CHECK(std::memcmp(&r, &m.record(), sizeof(r)) == 0);
    }
    FUZZ_CHECK(!core::describeMismatch(m.record()).empty());
    FUZZ_CHECK(!core::describeCall(m.record().a, m.record().rankA, m.record().rankB).empty());
  } catch (const Error& err) {
    FUZZ_CHECK(err.code() == ErrorCode::InternalError && h.magic != tcp::kPoisonMagic);
  }
  return 0;
}
