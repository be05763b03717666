// Communicator::createFromEnv: init from a launcher's environment.
//   rank and size:  COLLIE_RANK/COLLIE_NRANKS (collierun), RANK/WORLD_SIZE (torchrun),
//                   OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS (Slurm)
//   where to meet:  COLLIE_UNIQUE_ID (a whole id, root hosted elsewhere), else COLLIE_ROOT_ADDR, else
//                   MASTER_ADDR:(MASTER_PORT+1) (torchrun's own store holds MASTER_PORT), else what srun or a
//                   one-host mpirun implies (launch_env.hpp: first node of the step, port from the job id).
//                   Rank 0 hosts the root.
//   secret:         COLLIE_SECRET (32 hex digits; collierun sets one), else derived from the job's identity,
//                   which keeps strays from other jobs out but is no protection against a deliberate stranger.
#include "core/launch_env.hpp"

#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

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

namespace core {

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
  for (const char* v :
       {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}) {
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

std::string firstHostOfList(const std::string& hostlist) {
  std::string host;
  size_t i = 0;
  while (i < hostlist.size() && hostlist[i] != ',') {
    if (hostlist[i] != '[') {
      host += hostlist[i++];
      continue;
    }
    // A bracketed range list: keep its first number as written (leading zeros are part of the name).
    const size_t close = hostlist.find(']', i);
    if (close == std::string::npos) return host + hostlist.substr(i);  // malformed: left as it is
    const size_t stop = hostlist.find_first_of(",-", i + 1);
    host += hostlist.substr(i + 1, std::min(stop, close) - i - 1);
    i = close + 1;
  }
  return host;
}

int derivedPort(const std::string& jobIdentity) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the same on every host, unlike std::hash
  for (unsigned char c : jobIdentity) h = (h ^ c) * 1099511628211ull;
  return kDerivedPortBase + static_cast<int>(h % kDerivedPortSpan);
}

std::string meetingPointOfLauncher(const std::string& launcher, int rank, int nranks, std::string* from,
                                   std::string* why) {
  if (launcher == "Slurm") {
    // Only an srun step says which nodes its tasks run on; the batch script's own step sets SLURM_PROCID=0 and
    // SLURM_NTASKS=N too, but its other N-1 ranks would never come.
    const char* job = env("SLURM_JOB_ID");
    const char* step = env("SLURM_STEP_ID");
    const char* nodes = env("SLURM_STEP_NODELIST");
    const char* nnodes = env("SLURM_STEP_NUM_NODES");
    if (!job || !step || !nodes) {
      if (job && nranks == 1) {  // a one-rank program in the batch script: nobody else to meet
        *from = "Slurm: one rank outside a step, port from job " + std::string(job);
        return "127.0.0.1:" + std::to_string(derivedPort("slurm/" + std::string(job) + ".batch"));
      }
      *why =
          "SLURM_JOB_ID, SLURM_STEP_ID or SLURM_STEP_NODELIST is not set: not inside an srun step (run directly "
          "in the batch script?); start the ranks with srun";
      return "";
    }
    const bool oneNode = nnodes && std::string(nnodes) == "1";
    const std::string host = oneNode ? "127.0.0.1" : firstHostOfList(nodes);
    const char* myNode = env("SLURMD_NODENAME");
    if (rank == 0 && !oneNode && myNode && host != myNode) {
      *why = "rank 0 runs on " + std::string(myNode) + ", not on the step's first node " + host +
             " (a task distribution other than block or cyclic?)";
      return "";
    }
    const std::string id = std::string(job) + "." + step;
    *from = "Slurm: first node of " + std::string(nodes) + ", port from job.step " + id;
    return host + ":" + std::to_string(derivedPort("slurm/" + id));
  }
  if (launcher == "Open MPI") {
    const char* local = env("OMPI_COMM_WORLD_LOCAL_SIZE");
    const char* size = env("OMPI_COMM_WORLD_SIZE");
    const char* job = env("OMPI_MCA_ess_base_jobid") ? env("OMPI_MCA_ess_base_jobid") : env("PMIX_NAMESPACE");
    if (!local || !size || std::string(local) != size) {
      *why =
          "the ranks span several hosts and nothing says where rank 0 runs: pass mpirun -x MASTER_ADDR=<rank 0's "
          "host> -x MASTER_PORT=<free port> (or -x COLLIE_ROOT_ADDR=host:port)";
      return "";
    }
    if (!job) {
      *why = "no job id (OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE) to derive a port from";
      return "";
    }
    *from = "Open MPI: one host, port from job id " + std::string(job);
    return "127.0.0.1:" + std::to_string(derivedPort(std::string("ompi/") + job));
  }
  *why = launcher + " implies no meeting point";
  return "";
}

}  // namespace core

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
  std::string derivedFrom;  // set when the launcher's own variables gave the meeting point
  const char* host = env("MASTER_ADDR");
  const char* port = env("MASTER_PORT");
  if (rootAddr.empty() && !(host && port)) {
    std::string why;
    // Slurm's pmi2 plugin (srun --mpi=pmi2, MpiDefault=pmi2) sets PMI_RANK/PMI_SIZE: inside an srun step the
    // step's own variables say where to meet, whichever of its rank variables matched.
    const bool inSrunStep = env("SLURM_STEP_ID") && env("SLURM_STEP_NODELIST");
    const std::string launcher = (inSrunStep && found->launcher == std::string("PMI")) ? "Slurm" : found->launcher;
    rootAddr = core::meetingPointOfLauncher(launcher, rank, nranks, &derivedFrom, &why);
    COLLIE_USAGE_CHECK(!rootAddr.empty(),
                       "%s gave rank %d of %d but no meeting point: set COLLIE_UNIQUE_ID, COLLIE_ROOT_ADDR=host:port "
                       "or MASTER_ADDR and MASTER_PORT (%s)",
                       found->launcher, rank, nranks, why.c_str());
  } else if (rootAddr.empty()) {
    std::string h = host;
    if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
    rootAddr = h + ":" + std::to_string(envInt("MASTER_PORT", 0, 65534) + 1);
  }
  core::UniqueIdData id;
  id.root = base::parseAddress(rootAddr);
  id.secret = core::secretFromEnv(rootAddr, nranks);
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
      try {
        core::BootstrapRoot::start(any, id.secret, timeout);
      } catch (const Error& again) {
        if (derivedFrom.empty()) throw;
        COLLIE_FAIL(again.code(),
                    "%s (the meeting point %s was derived from %s: set MASTER_ADDR and MASTER_PORT or "
                    "COLLIE_ROOT_ADDR to choose another)",
                    again.what(), rootAddr.c_str(), derivedFrom.c_str());
      }
    }
  }
  COLLIE_INFO(base::kLogInit, "init from %s: rank %d of %d, root %s%s%s", found->launcher, rank, nranks,
              rootAddr.c_str(), derivedFrom.empty() ? "" : ", derived from ", derivedFrom.c_str());
  collieUniqueId raw = core::encodeUniqueId(id);
  UniqueId uid;
  uid.raw = raw;
  return create(nranks, uid, rank, options);
}

}  // namespace collie
