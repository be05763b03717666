// The unique id and the bootstrap client (see bootstrap.hpp for the protocol, bootstrap_wire.hpp for its bytes and
// bootstrap_root.cpp for the root).
#include "core/bootstrap.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/socket.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/bootstrap_wire.hpp"
#include "transport/handshake.hpp"

namespace collie::core {
namespace {

constexpr uint32_t kIdMagic = 0xc011e1d0;

struct PackedId {
  uint32_t magic;
  uint16_t family;
  uint16_t port;
  uint8_t addr[16];
  uint8_t secret[16];
  uint32_t scopeId;
};
static_assert(sizeof(PackedId) <= COLLIE_UNIQUE_ID_BYTES);

}  // namespace

collieUniqueId encodeUniqueId(const UniqueIdData& data) {
  PackedId packed{};
  packed.magic = kIdMagic;
  packed.family = data.root.ss_family;
  packed.port = static_cast<uint16_t>(base::addressPort(data.root));
  if (data.root.ss_family == AF_INET) {
    memcpy(packed.addr, &reinterpret_cast<const sockaddr_in&>(data.root).sin_addr, 4);
  } else {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(data.root);
    memcpy(packed.addr, &a6.sin6_addr, 16);
    packed.scopeId = a6.sin6_scope_id;
  }
  memcpy(packed.secret, data.secret.data(), 16);
  collieUniqueId id{};
  memcpy(id.internal, &packed, sizeof(packed));
  return id;
}

UniqueIdData decodeUniqueId(const collieUniqueId& id) {
  PackedId packed;
  memcpy(&packed, id.internal, sizeof(packed));
  COLLIE_ARG_CHECK(packed.magic == kIdMagic, "commId is not a collie unique id (bad magic 0x%x)", packed.magic);
  COLLIE_ARG_CHECK(packed.family == AF_INET || packed.family == AF_INET6, "commId holds an unknown address family %u",
                   packed.family);
  UniqueIdData data;
  data.root.ss_family = packed.family;
  if (packed.family == AF_INET) {
    memcpy(&reinterpret_cast<sockaddr_in&>(data.root).sin_addr, packed.addr, 4);
  } else {
    auto& a6 = reinterpret_cast<sockaddr_in6&>(data.root);
    memcpy(&a6.sin6_addr, packed.addr, 16);
    a6.sin6_scope_id = packed.scopeId;
  }
  base::setAddressPort(data.root, packed.port);
  memcpy(data.secret.data(), packed.secret, 16);
  return data;
}

std::string uniqueIdToHex(const collieUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * COLLIE_UNIQUE_ID_BYTES);
  for (char c : id.internal) {
    auto b = static_cast<uint8_t>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

collieUniqueId uniqueIdFromHex(const std::string& hex) {
  COLLIE_ARG_CHECK(hex.size() == 2 * COLLIE_UNIQUE_ID_BYTES, "unique id string has %zu characters, expected %d",
                   hex.size(), 2 * COLLIE_UNIQUE_ID_BYTES);
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    COLLIE_FAIL(ErrorCode::InvalidArgument, "unique id string has a non-hex character '%c'", c);
  };
  collieUniqueId id{};
  for (size_t i = 0; i < COLLIE_UNIQUE_ID_BYTES; ++i) {
    id.internal[i] = static_cast<char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return id;
}

std::array<uint8_t, 16> randomSecret() {
  std::array<uint8_t, 16> secret{};
  ssize_t got = getrandom(secret.data(), secret.size(), 0);
  COLLIE_ENFORCE(got == static_cast<ssize_t>(secret.size()), ErrorCode::SystemError, "getrandom failed: %s",
                 base::errnoString(errno).c_str());
  return secret;
}

std::vector<transport::PeerInfo> bootstrapExchange(const UniqueIdData& id, int rank, int nranks,
                                                   const transport::PeerInfo& self, const AgreedSettings& settings,
                                                   std::chrono::milliseconds timeout, const std::atomic<bool>* stop) {
  base::Deadline deadline = std::chrono::steady_clock::now() + timeout;
  std::string root = "bootstrap root " + base::addressToString(id.root);
  transport::UniqueFd conn(
      base::connectWithRetry(id.root, deadline, 1 << 30, root, {}, 0, std::chrono::milliseconds(0), stop));
  BootstrapHello hello;
  hello.secret = id.secret;
  hello.rank = rank;
  hello.nranks = nranks;
  hello.info = self;
  hello.settings = settings;
  std::vector<uint8_t> out = encodeBootstrapHello(hello);
  base::sendAll(conn.get(), out.data(), out.size(), deadline, root, stop);
  std::vector<uint8_t> in(kBootstrapReplyHeaderBytes);
  base::recvAll(conn.get(), in.data(), in.size(), deadline, root, stop);
  const std::vector<int> known = rootAnswerRanks(rank, nranks, settings.cardDirectory != 0);
  in.resize(bootstrapReplyBytes(in.data(), in.size(), known));  // the parsers' messages say what is wrong
  base::recvAll(conn.get(), in.data() + kBootstrapReplyHeaderBytes, in.size() - kBootstrapReplyHeaderBytes, deadline,
                root, stop);
  BootstrapReply reply = parseBootstrapReply(in.data(), in.size(), known);
  if (reply.status != ErrorCode::Success)
    COLLIE_FAIL(reply.status, "%s refused rank %d: %s", root.c_str(), rank, reply.message.c_str());
  std::vector<transport::PeerInfo> table(static_cast<size_t>(nranks));  // rank -1: not known yet
  table[static_cast<size_t>(rank)] = self;
  table[static_cast<size_t>(rank)].rank = rank;
  for (size_t i = 0; i < known.size(); ++i) table[static_cast<size_t>(known[i])] = reply.table[i];
  return table;
}

uint64_t localHostHash() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string key = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  if (boot >> bootId) key += bootId;
  return std::hash<std::string>{}(key);
}

}  // namespace collie::core
