// The bootstrap's bytes (src/core/bootstrap_wire.hpp): hellos and replies survive encoding field by field, and
// every kind of bad input (each truncation, a bad magic, ranks out of range, a PeerInfo that lies or is not
// terminated, unknown statuses, tables of the wrong size) is refused with RemoteError and a message saying what.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/bootstrap_wire.hpp"

namespace collie::core {
namespace {

template <typename F>
std::string failure(F&& f, ErrorCode expected = ErrorCode::RemoteError) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

transport::PeerInfo infoOf(int rank) {
  transport::PeerInfo info;
  info.rank = rank;
  info.pid = 1000 + rank;
  info.hostHash = 0x1234567890abcdefULL + static_cast<uint64_t>(rank);
  info.netNs = 0x4000 + static_cast<uint64_t>(rank);
  uint8_t addr[6] = {1, 2, 3, 4, 5, static_cast<uint8_t>(rank)};
  info.setAddress(transport::TransportKind::Tcp, addr, sizeof(addr));
  return info;
}

BootstrapHello helloOf(int rank, int nranks) {
  BootstrapHello h;
  for (size_t i = 0; i < h.secret.size(); ++i) h.secret[i] = static_cast<uint8_t>(i * 7 + 1);
  h.rank = rank;
  h.nranks = nranks;
  h.info = infoOf(rank);
  h.settings = AgreedSettings{65536, 683, 1, 1};
  return h;
}

void expectSameInfo(const transport::PeerInfo& a, const transport::PeerInfo& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.hostHash, b.hostHash);
  EXPECT_EQ(a.netNs, b.netNs);
  const transport::TransportAddress* x = a.address(transport::TransportKind::Tcp);
  const transport::TransportAddress* y = b.address(transport::TransportKind::Tcp);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(x->length, y->length);
  EXPECT_EQ(std::memcmp(x->bytes, y->bytes, x->length), 0);
}

TEST(BootstrapWire, HelloRoundTrips) {
  BootstrapHello in = helloOf(3, 8);
  std::vector<uint8_t> bytes = encodeBootstrapHello(in);
  ASSERT_EQ(bytes.size(), kBootstrapHelloBytes);
  BootstrapHello out = parseBootstrapHello(bytes.data(), bytes.size());
  EXPECT_EQ(out.secret, in.secret);
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.nranks, 8);
  expectSameInfo(out.info, in.info);
  EXPECT_EQ(out.settings.sliceBytes, in.settings.sliceBytes);
  EXPECT_EQ(out.settings.initChunk, in.settings.initChunk);
  EXPECT_EQ(out.settings.connectEager, in.settings.connectEager);
  EXPECT_EQ(out.settings.cardDirectory, in.settings.cardDirectory);
}

TEST(BootstrapWire, SettingsThatDifferAreNamedWithBothRanksAndValues) {
  AgreedSettings a, b;
  EXPECT_EQ(describeSettingsDifference(a, 0, b, 5), "");
  b.sliceBytes = 8192;
  EXPECT_EQ(describeSettingsDifference(a, 0, b, 5),
            "COLLIE_SLICE_BYTES is 0 (unset) on rank 0 but 8192 on rank 5; it must be the same on every rank");
  b = a;
  b.initChunk = 64;
  EXPECT_NE(describeSettingsDifference(a, 0, b, 1).find("COLLIE_INIT_CHUNK is 0 (unset) on rank 0 but 64 on rank 1"),
            std::string::npos);
  b = a;
  a.connectEager = 1;
  EXPECT_NE(describeSettingsDifference(a, 0, b, 3).find("is eager on rank 0 but lazy on rank 3"), std::string::npos);
  a = b;
  b.cardDirectory = 1;
  EXPECT_NE(describeSettingsDifference(a, 0, b, 4).find("COLLIE_PEER_CARDS is all on rank 0 but directory on rank 4"),
            std::string::npos);
  b = a;
  // The root sends the message in a reply of kBootstrapMessageBytes: the longest one fits.
  a.sliceBytes = 1073741824;
  b.sliceBytes = 1073741823;
  EXPECT_LT(describeSettingsDifference(a, 0, b, 2147483647).size(), kBootstrapMessageBytes);
}

TEST(BootstrapWire, EveryTruncatedOrOverlongHelloIsRefused) {
  std::vector<uint8_t> bytes = encodeBootstrapHello(helloOf(0, 2));
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));  // exactly n bytes
    std::string m = failure([&] { parseBootstrapHello(part.data(), part.size()); });
    EXPECT_NE(m.find("bootstrap hello has " + std::to_string(n) + " bytes"), std::string::npos) << m;
  }
  bytes.push_back(0);
  failure([&] { parseBootstrapHello(bytes.data(), bytes.size()); });
}

TEST(BootstrapWire, BadHellosNameTheirProblem) {
  auto refused = [](BootstrapHello h, auto&& spoil) {
    std::vector<uint8_t> bytes = encodeBootstrapHello(h);
    spoil(bytes, h);
    return failure([&] { parseBootstrapHello(bytes.data(), bytes.size()); });
  };
  auto reencode = [](std::vector<uint8_t>& b, const BootstrapHello& h) { b = encodeBootstrapHello(h); };
  EXPECT_NE(refused(helloOf(0, 2), [](std::vector<uint8_t>& b, auto&) { b[0] ^= 1; }).find("bad magic"),
            std::string::npos);
  BootstrapHello h = helloOf(2, 2);  // rank == nranks
  EXPECT_NE(refused(h, reencode).find("rank 2, outside [0, 2)"), std::string::npos);
  h = helloOf(0, 0);
  EXPECT_NE(refused(h, reencode).find("nranks=0"), std::string::npos);
  h = helloOf(-1, 4);
  EXPECT_NE(refused(h, reencode).find("rank -1"), std::string::npos);
  h = helloOf(1, 4);
  h.info.rank = 2;
  EXPECT_NE(refused(h, reencode).find("the peer info of rank 1 says it is rank 2"), std::string::npos);
  h = helloOf(1, 4);
  h.info.addresses[0].length = transport::TransportAddress::kBytes + 1;
  EXPECT_NE(refused(h, reencode).find("23-byte transport address"), std::string::npos);
  h = helloOf(1, 4);
  h.settings.connectEager = 2;
  EXPECT_NE(refused(h, reencode).find("of rank 1 holds impossible settings"), std::string::npos);
  h = helloOf(1, 4);
  h.settings.cardDirectory = -1;
  EXPECT_NE(refused(h, reencode).find("card directory -1"), std::string::npos);
  h = helloOf(1, 4);
  h.settings.sliceBytes = -1;
  EXPECT_NE(refused(h, reencode).find("impossible settings (slice -1"), std::string::npos);
}

// Ranks 0 .. n-1: a reply that carries n entries in order (the parsers take the ranks they expect).
std::vector<int> allRanks(int n) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) out.push_back(r);
  return out;
}

TEST(BootstrapWire, PeersReplyRoundTripsForEveryRankOfSmallCommunicators) {
  for (int n = 1; n <= 9; ++n) {
    for (int rank = 0; rank < n; ++rank) {
      const std::vector<int> peers = bootstrapPeers(rank, n);
      BootstrapReply in;
      for (int p : peers) in.table.push_back(infoOf(p));
      const std::vector<uint8_t> bytes = encodeBootstrapReply(in);
      BootstrapReply out = parseBootstrapReply(bytes.data(), bytes.size(), peers);
      ASSERT_EQ(out.table.size(), peers.size());
      for (size_t i = 0; i < peers.size(); ++i) expectSameInfo(out.table[i], in.table[i]);
      if (peers.size() >= 2)  // the entries in another order are refused
        failure([&] {
          std::vector<int> swapped = peers;
          std::swap(swapped[0], swapped[1]);
          parseBootstrapReply(bytes.data(), bytes.size(), swapped);
        });
    }
  }
  // The tree neighbours, ascending: for 8 ranks the root is 0, its children 6 and 2, theirs 5, 7 and 1, 3, then 4.
  EXPECT_EQ(bootstrapPeers(0, 8), (std::vector<int>{2, 6}));
  EXPECT_EQ(bootstrapPeers(6, 8), (std::vector<int>{0, 5, 7}));
  EXPECT_EQ(bootstrapPeers(5, 8), (std::vector<int>{4, 6}));
  EXPECT_EQ(bootstrapPeers(4, 8), (std::vector<int>{5}));
}

TEST(BootstrapWire, TableReplyRoundTrips) {
  BootstrapReply in;
  for (int r = 0; r < 5; ++r) in.table.push_back(infoOf(r));
  std::vector<uint8_t> bytes = encodeBootstrapReply(in);
  ASSERT_EQ(bytes.size(), kBootstrapReplyHeaderBytes + 5 * sizeof(transport::PeerInfo));
  EXPECT_EQ(bootstrapReplyBytes(bytes.data(), kBootstrapReplyHeaderBytes, allRanks(5)), bytes.size());
  BootstrapReply out = parseBootstrapReply(bytes.data(), bytes.size(), allRanks(5));
  EXPECT_EQ(out.status, ErrorCode::Success);
  ASSERT_EQ(out.table.size(), 5u);
  for (int r = 0; r < 5; ++r) expectSameInfo(out.table[static_cast<size_t>(r)], in.table[static_cast<size_t>(r)]);
}

TEST(BootstrapWire, RefusalReplyRoundTripsAndItsMessageIsCut) {
  BootstrapReply in;
  in.status = ErrorCode::InvalidUsage;
  in.message = "rank 1 checked in twice";
  std::vector<uint8_t> bytes = encodeBootstrapReply(in);
  ASSERT_EQ(bytes.size(), kBootstrapReplyHeaderBytes);
  EXPECT_EQ(bootstrapReplyBytes(bytes.data(), bytes.size(), allRanks(7)), kBootstrapReplyHeaderBytes);
  BootstrapReply out = parseBootstrapReply(bytes.data(), bytes.size(), allRanks(7));
  EXPECT_EQ(out.status, ErrorCode::InvalidUsage);
  EXPECT_EQ(out.message, in.message);
  EXPECT_TRUE(out.table.empty());

  in.message = std::string(500, 'm');
  bytes = encodeBootstrapReply(in);
  EXPECT_EQ(parseBootstrapReply(bytes.data(), bytes.size(), allRanks(7)).message,
            std::string(kBootstrapMessageBytes - 1, 'm'));
  // An unterminated message from a broken root is read up to the field's end, no further.
  std::memset(bytes.data() + 12, 'z', kBootstrapMessageBytes);
  EXPECT_EQ(parseBootstrapReply(bytes.data(), bytes.size(), allRanks(7)).message,
            std::string(kBootstrapMessageBytes, 'z'));
}

TEST(BootstrapWire, BadRepliesNameTheirProblem) {
  BootstrapReply good;
  for (int r = 0; r < 3; ++r) good.table.push_back(infoOf(r));
  const std::vector<uint8_t> bytes = encodeBootstrapReply(good);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    failure([&] { parseBootstrapReply(part.data(), part.size(), allRanks(3)); });
  }
  EXPECT_NE(failure([&] {
              parseBootstrapReply(bytes.data(), bytes.size(), allRanks(4));
            }).find("table of 3 ranks, expected 4"),
            std::string::npos);
  EXPECT_NE(failure([&] { bootstrapReplyBytes(bytes.data(), 8, allRanks(3)); }).find("truncated"), std::string::npos);

  std::vector<uint8_t> b = bytes;
  b[3] ^= 0x80;
  EXPECT_NE(failure([&] { parseBootstrapReply(b.data(), b.size(), allRanks(3)); }).find("bad magic"),
            std::string::npos);
  BootstrapReply wrong = good;
  wrong.table[1].rank = 2;
  b = encodeBootstrapReply(wrong);
  EXPECT_NE(failure([&] {
              parseBootstrapReply(b.data(), b.size(), allRanks(3));
            }).find("peer info of rank 1 says it is rank 2"),
            std::string::npos);
  for (int32_t status : {-1, 7, 9, 1 << 30}) {
    b = bytes;
    std::memcpy(b.data() + 4, &status, 4);
    // A refusal is only the header: cut the table so that the status is what is wrong.
    b.resize(kBootstrapReplyHeaderBytes);
    std::memset(b.data() + 8, 0, 4);
    EXPECT_NE(failure([&] { parseBootstrapReply(b.data(), b.size(), allRanks(3)); }).find("unknown status"),
              std::string::npos)
        << status;
  }
  b = bytes;
  int32_t refused = static_cast<int32_t>(ErrorCode::InvalidUsage);
  std::memcpy(b.data() + 4, &refused, 4);
  b.resize(kBootstrapReplyHeaderBytes);  // count still says 3
  EXPECT_NE(failure([&] { parseBootstrapReply(b.data(), b.size(), allRanks(3)); }).find("refuses but holds a table"),
            std::string::npos);
}

}  // namespace
}  // namespace collie::core
