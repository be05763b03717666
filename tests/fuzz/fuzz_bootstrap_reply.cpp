// Fuzzes a rank's parsers of the bootstrap root's reply (core::bootstrapReplyBytes on the fixed-size header, then
// core::parseBootstrapReply on the whole reply, as bootstrapExchange calls them: the bytes come from whatever
// answers at the root's address). The first input byte is the rank's nranks minus one (so 0 to 255 ranks are
// tried, 0 being invalid), the second its rank; the rest is the reply. Invariants: a reply that parses is a refusal
// with a message that fits its field, or the well-formed entries of the rank's bootstrapPeers (bootstrap_plan.hpp),
// in order; encoded and parsed again, it is the same (the message cut to what encoding keeps).
#include <cstring>

#include "base/errors.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/bootstrap_wire.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collie;
  if (size < 2) return 0;
  const int nranks = static_cast<int>(data[0]) - 1;
  const int rank = static_cast<int>(data[1]);
  if (nranks < 1 || rank >= nranks) return 0;  // bootstrapExchange's caller checked these
  const std::vector<int> ranks = core::bootstrapPeers(rank, nranks);
  const uint8_t* bytes = data + 2;
  const size_t n = size - 2;
  try {
    size_t whole = core::bootstrapReplyBytes(bytes, std::min(n, core::kBootstrapReplyHeaderBytes), ranks);
    FUZZ_CHECK(whole >= core::kBootstrapReplyHeaderBytes);
  } catch (const Error&) {
  }
  core::BootstrapReply reply;
  try {
    reply = core::parseBootstrapReply(bytes, n, ranks);
  } catch (const Error&) {
    return 0;
  }
  if (reply.status == ErrorCode::Success) {
    FUZZ_CHECK(reply.table.size() == ranks.size());
    for (size_t i = 0; i < reply.table.size(); ++i) {
      const transport::PeerInfo& info = reply.table[i];
      FUZZ_CHECK(info.rank == ranks[i]);
      for (const auto& a : info.addresses) FUZZ_CHECK(a.length <= transport::TransportAddress::kBytes);
    }
  } else {
    // An unterminated message (from a broken root) is read up to the field's end, no further.
    FUZZ_CHECK(reply.table.empty() && reply.message.size() <= core::kBootstrapMessageBytes);
  }
  const std::vector<uint8_t> encoded = core::encodeBootstrapReply(reply);
  core::BootstrapReply again = core::parseBootstrapReply(encoded.data(), encoded.size(), ranks);
  FUZZ_CHECK(again.status == reply.status && again.table.size() == reply.table.size());
  FUZZ_CHECK(again.message == reply.message.substr(0, core::kBootstrapMessageBytes - 1));  // what encoding keeps
  if (!reply.table.empty())
    FUZZ_CHECK(std::memcmp(again.table.data(), reply.table.data(), reply.table.size() * sizeof(reply.table[0])) == 0);
  return 0;
}
