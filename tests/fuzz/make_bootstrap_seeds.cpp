// Writes the seed corpora of the two bootstrap fuzzers (corpus/bootstrap_hello/, corpus/bootstrap_reply/) from the
// encoders they fuzz, so that the seeds follow the wire format (bootstrap_wire.hpp) when it changes: each is a
// well-formed message or one with a single named fault. The CTest fuzz_seeds_bootstrap writes them into a temporary
// folder and compares them with the committed ones; after a format change, refresh those with
//   build/tests/fuzz/make_bootstrap_seeds tests/fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/bootstrap_plan.hpp"
#include "core/bootstrap_wire.hpp"

namespace {

using namespace collie;
using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

transport::PeerInfo infoOf(int rank) {
  transport::PeerInfo info;
  info.rank = rank;
  info.pid = 4000 + rank;
  info.hostHash = 0x5eed000000000000ull + static_cast<uint64_t>(rank / 2);  // two ranks per host
  info.netNs = 0x4026531840ull;
  const uint8_t tcp[6] = {0x9c, 0x40, 10, 0, 0, static_cast<uint8_t>(1 + rank)};  // port 40000, 10.0.0.(rank+1)
  info.setAddress(transport::TransportKind::Tcp, tcp, sizeof(tcp));
  uint8_t shm[12] = {0};
  std::memcpy(shm, &info.pid, 4);
  shm[4] = static_cast<uint8_t>(0xa0 + rank);
  info.setAddress(transport::TransportKind::Shm, shm, sizeof(shm));
  return info;
}

Bytes hello(int rank, int nranks) {
  core::BootstrapHello h;
  for (size_t i = 0; i < h.secret.size(); ++i) h.secret[i] = static_cast<uint8_t>(0x11 * (i + 1));
  h.rank = rank;
  h.nranks = nranks;
  h.info = infoOf(rank);
  h.settings = core::AgreedSettings{65536, 683, rank % 2, rank % 3 == 0 ? 1 : 0};
  return core::encodeBootstrapHello(h);
}

/// The fuzzer's input: nranks + 1, the rank, then the reply bytes.
Bytes replyInput(int nranks, int rank, const Bytes& reply) {
  Bytes out{static_cast<uint8_t>(nranks + 1), static_cast<uint8_t>(rank)};
  out.insert(out.end(), reply.begin(), reply.end());
  return out;
}

Bytes table(int rank, int nranks) {
  core::BootstrapReply r;
  for (int peer : core::bootstrapPeers(rank, nranks)) r.table.push_back(infoOf(peer));
  return core::encodeBootstrapReply(r);
}

Bytes refusal(const std::string& message) {
  core::BootstrapReply r;
  r.status = ErrorCode::InvalidArgument;
  r.message = message;
  return core::encodeBootstrapReply(r);
}

void put(const fs::path& dir, const char* name, const Bytes& bytes) {
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "make_bootstrap_seeds: cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

void writeHellos(const fs::path& dir) {
  constexpr size_t kInfoAt = 4 + 16 + 4 + 4;  // magic, secret, rank, nranks (bootstrap_wire.hpp)
  put(dir, "empty", {});
  put(dir, "valid_rank0_of1", hello(0, 1));
  put(dir, "valid_rank1_of4", hello(1, 4));
  Bytes b = hello(1, 4);
  b[0] ^= 1;
  put(dir, "bad_magic", b);
  put(dir, "nranks_zero", hello(0, 0));
  put(dir, "rank_out_of_range", hello(4, 4));
  b = hello(1, 4);
  b[kInfoAt + offsetof(transport::PeerInfo, rank)] = 2;
  put(dir, "info_other_rank", b);
  b = hello(1, 4);
  b[kInfoAt + offsetof(transport::PeerInfo, addresses) + offsetof(transport::TransportAddress, length)] =
      transport::TransportAddress::kBytes + 1;
  put(dir, "address_too_long", b);
  b = hello(1, 4);
  b[kInfoAt + sizeof(transport::PeerInfo) + offsetof(core::AgreedSettings, connectEager)] = 7;
  put(dir, "settings_impossible", b);
  b = hello(1, 4);
  b.resize(b.size() / 2);
  put(dir, "truncated", b);
}

void writeReplies(const fs::path& dir) {
  put(dir, "ok_1rank", replyInput(1, 0, table(0, 1)));
  put(dir, "ok_3ranks", replyInput(3, 1, table(1, 3)));
  put(dir, "ok_5ranks", replyInput(5, 4, table(4, 5)));
  Bytes b = table(0, 4);
  b.resize(core::kBootstrapReplyHeaderBytes / 4);
  put(dir, "header_only", replyInput(4, 0, b));
  b = table(0, 4);
  b.resize(b.size() - 10);
  put(dir, "truncated_table", replyInput(4, 0, b));
  put(dir, "count_mismatch", replyInput(4, 0, table(0, 2)));  // a 2-rank table for a rank of 4
  b = table(0, 4);
  b[core::kBootstrapReplyHeaderBytes + offsetof(transport::PeerInfo, rank)] ^= 3;
  put(dir, "entry_wrong_rank", replyInput(4, 0, b));
  put(dir, "nranks_zero", replyInput(0, 0, table(0, 1)));
  put(dir, "refused", replyInput(4, 2, refusal("rank 2 is already in")));
  b = refusal("");
  std::memset(b.data() + 12, 'x', core::kBootstrapMessageBytes);
  put(dir, "refused_message_unterminated", replyInput(4, 2, b));
  b = refusal("refused");
  const Bytes entries = table(2, 4);
  b.insert(b.end(), entries.begin() + static_cast<std::ptrdiff_t>(core::kBootstrapReplyHeaderBytes), entries.end());
  put(dir, "refused_with_table", replyInput(4, 2, b));
  b = table(0, 4);
  const int32_t unknown = 9999;
  std::memcpy(b.data() + 4, &unknown, 4);
  put(dir, "unknown_status", replyInput(4, 0, b));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR   (writes CORPUS_DIR/bootstrap_hello/ and bootstrap_reply/)\n", argv[0]);
    return 2;
  }
  writeHellos(fs::path(argv[1]) / "bootstrap_hello");
  writeReplies(fs::path(argv[1]) / "bootstrap_reply");
  return 0;
}
