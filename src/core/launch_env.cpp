// Communicator::createFromEnv: init from a launcher's environment.
//   rank and size:  COLLIE_RANK/COLLIE_NRANKS (collierun), RANK/WORLD_SIZE (torchrun),
//                   OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS (Slurm)
//   where to meet:  COLLIE_UNIQUE_ID (a whole id, root hosted elsewhere), else COLLIE_ROOT_ADDR, else
//                   MASTER_ADDR:(MASTER_PORT+1) (torchrun's own store holds MASTER_PORT). Rank 0 hosts the root.
//   secret:         COLLIE_SECRET (32 hex digits; collierun sets one), else derived from the job's identity,
//                   which keeps strays from other jobs out but is no protection against a deliberate stranger.
#include <netinet/in.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <functional>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "base/socket.hpp"
#include "core/bootstrap.hpp"
#include "core/communicator.hpp"

namespace collie {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

/// A launcher's integer variable, in [lo, hi] (a value past an int's range is refused, not truncated).
int envInt(const char* name, long lo, long hi) {
  const char* v = env(name);
  char* end = nullptr;
  errno = 0;
  long parsed = std::strtol(v, &end, 10);
  COLLIE_ARG_CHECK(end != v && *end == '\0' && errno != ERANGE && parsed >= lo && parsed <= hi,
                   "environment variable %s='%s' is not an integer in [%ld, %ld]", name, v, lo, hi);
  return static_cast<int>(parsed);
}

struct RankVars {
  const char* rank;
  const char* size;
  const char* launcher;
};

std::array<uint8_t, 16> secretFromEnv(const std::string& rootAddr, int nranks) {
  std::array<uint8_t, 16> secret{};
  if (const char* hex = env("COLLIE_SECRET")) {
    std::string h = hex;
    COLLIE_ARG_CHECK(h.size() == 32 && h.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
                     "COLLIE_SECRET must be 32 hex digits");
    for (size_t i = 0; i < 16; ++i) secret[i] = static_cast<uint8_t>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
    return secret;
  }
  std::string job = rootAddr + "/" + std::to_string(nranks);
  for (const char* v : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid"}) {
    if (const char* x = env(v)) job += std::string("/") + x;
  }
  COLLIE_INFO(base::kLogInit, "no COLLIE_SECRET: using a secret derived from the job (%s)", job.c_str());
  uint64_t h1 = std::hash<std::string>{}(job), h2 = std::hash<std::string>{}(job + "#collie");
  for (size_t i = 0; i < 8; ++i) {
    secret[i] = static_cast<uint8_t>(h1 >> (8 * i));
    secret[8 + i] = static_cast<uint8_t>(h2 >> (8 * i));
  }
  return secret;
}

/// Whether `a` is a loopback address (127/8, ::1, or 127/8 mapped into IPv6).
bool isLoopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& in6 = reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&in6) || (IN6_IS_ADDR_V4MAPPED(&in6) && in6.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::createFromEnv(const Options& options) {
  static const RankVars kVars[] = {{"COLLIE_RANK", "COLLIE_NRANKS", "collierun"},
                                   {"RANK", "WORLD_SIZE", "torchrun"},
                                   {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
                                   {"PMI_RANK", "PMI_SIZE", "PMI"},
                                   {"SLURM_PROCID", "SLURM_NTASKS", "Slurm"}};
  const RankVars* found = nullptr;
  for (const RankVars& v : kVars) {
    if (env(v.rank) && env(v.size)) {
      found = &v;
      break;
    }
  }
  COLLIE_USAGE_CHECK(found != nullptr,
                     "no launcher environment found: set COLLIE_RANK/COLLIE_NRANKS (collierun), RANK/WORLD_SIZE "
                     "(torchrun), OMPI_COMM_WORLD_RANK/SIZE (Open MPI) or SLURM_PROCID/SLURM_NTASKS (Slurm)");
  const int rank = envInt(found->rank, 0, INT_MAX - 1), nranks = envInt(found->size, 1, INT_MAX);
  COLLIE_ARG_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "%s=%d and %s=%d from %s are inconsistent", found->rank,
                   rank, found->size, nranks, found->launcher);

  if (const char* hex = env("COLLIE_UNIQUE_ID")) {
    return create(nranks, UniqueId::fromString(hex), rank, options);
  }
  std::string rootAddr = base::params::rootAddr();
  if (rootAddr.empty()) {
    const char* host = env("MASTER_ADDR");
    const char* port = env("MASTER_PORT");
    COLLIE_USAGE_CHECK(host && port,
                       "%s gave rank %d of %d but no meeting point: set COLLIE_UNIQUE_ID, COLLIE_ROOT_ADDR=host:port "
                       "or MASTER_ADDR and MASTER_PORT",
                       found->launcher, rank, nranks);
    std::string h = host;
    if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
    rootAddr = h + ":" + std::to_string(envInt("MASTER_PORT", 0, 65534) + 1);
  }
  core::UniqueIdData id;
  id.root = base::parseAddress(rootAddr);
  id.secret = secretFromEnv(rootAddr, nranks);
  if (rank == 0) {
    // Listen where the others dial (the root address itself), not on every interface; only when that address
    // is not one of this host's (a name that resolves elsewhere, NAT) on every address of its family.
    // A host name that this host maps to loopback (Debian's /etc/hosts maps its own name to 127.0.1.1) while the
    // other hosts resolve it to a real address gets every address too, unless the text itself names loopback.
    const std::chrono::milliseconds timeout(base::params::timeoutMs());
    const bool saysLoopback =
        rootAddr.rfind("localhost", 0) == 0 || rootAddr.rfind("127.", 0) == 0 || rootAddr.rfind("[::1]", 0) == 0;
    try {
      if (isLoopback(id.root) && !saysLoopback)
        COLLIE_FAIL(ErrorCode::SystemError, "%s resolves to loopback on this host", rootAddr.c_str());
      core::BootstrapRoot::start(id.root, id.secret, timeout);
    } catch (const Error& e) {
      COLLIE_INFO(base::kLogInit, "bootstrap root: not listening on %s only (%s); listening on every address",
                  rootAddr.c_str(), e.what());
      sockaddr_storage any{};
      any.ss_family = id.root.ss_family;
      base::setAddressPort(any, base::addressPort(id.root));
      core::BootstrapRoot::start(any, id.secret, timeout);
    }
  }
  COLLIE_INFO(base::kLogInit, "init from %s: rank %d of %d, root %s", found->launcher, rank, nranks, rootAddr.c_str());
  collieUniqueId raw = core::encodeUniqueId(id);
  UniqueId uid;
  uid.raw = raw;
  return create(nranks, uid, rank, options);
}

}  // namespace collie
