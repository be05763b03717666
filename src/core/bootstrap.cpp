// Bootstrap root and client (see bootstrap.hpp for the protocol).
//
// Wire format (all host byte order: every rank of a job runs the same build on the same architecture):
//   rank -> root : Hello {magic, secret[16], rank, nranks} then PeerInfo
//   root -> rank : Reply {magic, status, message[200]} then, if status == 0, nranks x PeerInfo
#include "core/bootstrap.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/socket.hpp"

namespace collie::core {
namespace {

constexpr uint32_t kIdMagic = 0xc011e1d0;
constexpr uint32_t kHelloMagic = 0xc011eb00;
constexpr auto kHelloWait = std::chrono::seconds(5);  // how long the root waits for a connection to speak

struct PackedId {
  uint32_t magic;
  uint16_t family;
  uint16_t port;
  uint8_t addr[16];
  uint8_t secret[16];
  uint32_t scopeId;
};
static_assert(sizeof(PackedId) <= COLLIE_UNIQUE_ID_BYTES);

struct Hello {
  uint32_t magic;
  uint8_t secret[16];
  int32_t rank;
  int32_t nranks;
};

struct Reply {
  uint32_t magic;
  int32_t status;  // 0 ok, else an ErrorCode
  char message[200];
};

base::Deadline deadlineAfter(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

void sendReply(int fd, ErrorCode status, const std::string& message, base::Deadline deadline) {
  Reply reply{};
  reply.magic = kHelloMagic;
  reply.status = static_cast<int32_t>(status);
  snprintf(reply.message, sizeof(reply.message), "%s", message.c_str());
  base::sendAll(fd, &reply, sizeof(reply), deadline, "bootstrap rank");
}

// Serves one bootstrap: collects every rank's PeerInfo, then sends everyone the table.
void serveRoot(int listenFd, std::array<uint8_t, 16> secret, std::chrono::milliseconds timeout) {
  FdGuard listener{listenFd};
  base::Deadline deadline = deadlineAfter(timeout);
  std::map<int, int> rankFds;  // rank -> fd
  std::vector<transport::PeerInfo> table;
  int nranks = -1;
  auto closeAll = [&] {
    for (auto& [r, fd] : rankFds) ::close(fd);
    rankFds.clear();
  };
  try {
    while (nranks < 0 || static_cast<int>(rankFds.size()) < nranks) {
      sockaddr_storage from{};
      int fd = base::acceptUntil(listenFd, deadline, &from);
      if (fd < 0) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: timed out with %zu of %d ranks checked in", rankFds.size(),
                    nranks);
        closeAll();
        return;
      }
      std::string who = base::addressToString(from);
      Hello hello{};
      try {
        base::Deadline helloDeadline = std::min(deadline, std::chrono::steady_clock::now() + kHelloWait);
        base::recvAll(fd, &hello, sizeof(hello), helloDeadline, "bootstrap connection from " + who);
      } catch (const Error& e) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: refused connection from %s: %s", who.c_str(), e.what());
        ::close(fd);
        continue;
      }
      if (hello.magic != kHelloMagic || memcmp(hello.secret, secret.data(), secret.size()) != 0) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: refused connection from %s: it did not present the secret",
                    who.c_str());
        ::close(fd);
        continue;
      }
      transport::PeerInfo info;
      try {
        base::recvAll(fd, &info, sizeof(info), deadline, "bootstrap rank at " + who);
      } catch (const Error& e) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: lost %s: %s", who.c_str(), e.what());
        ::close(fd);
        continue;
      }
      std::string problem;
      if (nranks < 0 && hello.nranks > 0) {
        nranks = hello.nranks;
        table.resize(static_cast<size_t>(nranks));
      }
      if (hello.nranks != nranks) {
        problem = base::format("rank %d says nranks=%d but an earlier rank said %d", hello.rank, hello.nranks, nranks);
      } else if (hello.rank < 0 || hello.rank >= nranks) {
        problem = base::format("rank %d is outside [0, %d)", hello.rank, nranks);
      } else if (rankFds.count(hello.rank)) {
        problem = base::format("rank %d checked in twice (from %s)", hello.rank, who.c_str());
      }
      if (!problem.empty()) {
        COLLIE_WARN(base::kLogBootstrap, "bootstrap root: %s", problem.c_str());
        try {
          sendReply(fd, ErrorCode::InvalidUsage, problem, deadline);
        } catch (const Error&) {
        }
        ::close(fd);
        continue;
      }
      table[static_cast<size_t>(hello.rank)] = info;
      rankFds[hello.rank] = fd;
      COLLIE_INFO(base::kLogBootstrap, "bootstrap root: rank %d of %d checked in from %s", hello.rank, nranks,
                  who.c_str());
    }
    for (auto& [r, fd] : rankFds) {
      sendReply(fd, ErrorCode::Success, "", deadline);
      base::sendAll(fd, table.data(), table.size() * sizeof(transport::PeerInfo), deadline, base::format("rank %d", r));
    }
  } catch (const Error& e) {
    COLLIE_WARN(base::kLogBootstrap, "bootstrap root failed: %s", e.what());
  }
  closeAll();
}

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

UniqueIdData BootstrapRoot::start(const sockaddr_storage& addr, const std::array<uint8_t, 16>& secret,
                                  std::chrono::milliseconds timeout) {
  UniqueIdData data;
  data.root = addr;
  data.secret = secret;
  int fd = base::listenOn(data.root);
  std::thread(serveRoot, fd, secret, timeout).detach();
  COLLIE_INFO(base::kLogBootstrap, "bootstrap root listening on %s", base::addressToString(data.root).c_str());
  return data;
}

std::vector<transport::PeerInfo> bootstrapExchange(const UniqueIdData& id, int rank, int nranks,
                                                   const transport::PeerInfo& self, std::chrono::milliseconds timeout) {
  base::Deadline deadline = deadlineAfter(timeout);
  std::string root = "bootstrap root " + base::addressToString(id.root);
  FdGuard conn{base::connectWithRetry(id.root, deadline, 1 << 30, root)};
  Hello hello{};
  hello.magic = kHelloMagic;
  memcpy(hello.secret, id.secret.data(), 16);
  hello.rank = rank;
  hello.nranks = nranks;
  base::sendAll(conn.fd, &hello, sizeof(hello), deadline, root);
  base::sendAll(conn.fd, &self, sizeof(self), deadline, root);
  Reply reply{};
  base::recvAll(conn.fd, &reply, sizeof(reply), deadline, root);
  COLLIE_ENFORCE(reply.magic == kHelloMagic, ErrorCode::RemoteError, "%s sent a malformed reply", root.c_str());
  if (reply.status != 0) {
    reply.message[sizeof(reply.message) - 1] = '\0';
    COLLIE_FAIL(static_cast<ErrorCode>(reply.status), "%s refused rank %d: %s", root.c_str(), rank, reply.message);
  }
  std::vector<transport::PeerInfo> table(static_cast<size_t>(nranks));
  base::recvAll(conn.fd, table.data(), table.size() * sizeof(transport::PeerInfo), deadline, root);
  for (int r = 0; r < nranks; ++r) {
    COLLIE_ENFORCE(table[static_cast<size_t>(r)].rank == r, ErrorCode::InternalError,
                   "bootstrap table entry %d names rank %d", r, table[static_cast<size_t>(r)].rank);
  }
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
