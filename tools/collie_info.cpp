// collie-info: what this build of collie is and how it is configured: the version, the optional parts built
// in (and the host reduction kernels this CPU runs), and every COLLIE_* parameter with its default and current
// value.
//
//   collie-info             everything
//   collie-info --params    the parameter table only
//   collie-info --topo      the machine (NUMA nodes, cores, GPUs, NICs) and the transport each peer pair gets
//   collie-info --tuner [--nranks N] [--transport tcp|shm] [--hosts H --ranks-per-host L [--interleaved]]
//                           the algorithm and slice size the tuner picks per collective and message size; with
//                           --hosts, for H hosts of L ranks (shm inside a host, --transport between hosts; ranks
//                           r / L on a host, or r mod H with --interleaved, as on the test bed); --ranks-per-cpu R
//                           prices the CPUs as a communicator with R ranks per CPU does (the test bed: 4)
//   collie-info --ucx       the UCX transport: built or not, UCX's version and transports here, COLLIE_NET's pick
//   collie-info --version   the version only
//
// Each section is one entry of kSections; a new one (--topo, --tuner, ...) is a new entry and a function.
#include <collie/config.h>
#include <sched.h>

#include <algorithm>
#include <collie/collie.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/datatypes.hpp"
#include "base/params.hpp"
#include "base/topology.hpp"
#include "core/communicator.hpp"
#include "core/setup.hpp"
#include "core/tuner.hpp"
#if COLLIE_WITH_UCX
#include "transport/ucx/ucx_worker.hpp"
#endif

namespace {

void printVersion() { std::printf("collie %s\n", COLLIE_VERSION_STRING); }

void printBuild() {
  struct Option {
    const char* name;
    int on;
    const char* note;  // what ON means today
  };
  const Option options[] = {
      {"COLLIE_WITH_CUDA", COLLIE_WITH_CUDA,
       " (libcollie_cuda.so built: device buffers staged through pinned host memory; never run on a GPU yet)"},
      {"COLLIE_WITH_IBVERBS", COLLIE_WITH_IBVERBS, " (rdma-core found; the verbs transport is not implemented yet)"},
      {"COLLIE_WITH_HWLOC", COLLIE_WITH_HWLOC, ""},
      {"COLLIE_WITH_UCX", COLLIE_WITH_UCX, " (the ucx transport: COLLIE_NET=ucx, or auto where UCX has RDMA)"},
      {"COLLIE_WITH_TORCH", COLLIE_WITH_TORCH, ""}};
  std::printf("Build options:\n");
  for (const Option& o : options) std::printf("  %-20s %s%s\n", o.name, o.on ? "ON" : "OFF", o.on ? o.note : "");
  std::printf("  %-20s %s\n", "host kernels", collie::base::kernelIsaName(collie::base::kernelIsa()));
}

std::string shown(const std::string& value) { return value.empty() ? "(empty)" : value; }

void printParams() {
  std::vector<collie::base::params::ParamInfo> rows = collie::base::params::all();
  const char* headers[] = {"Parameter", "Type", "Default", "Value"};
  size_t widths[4];
  for (int c = 0; c < 4; ++c) widths[c] = std::strlen(headers[c]);
  for (const auto& r : rows) {
    widths[0] = std::max(widths[0], std::strlen(r.env));
    widths[1] = std::max(widths[1], std::strlen(r.type));
    widths[2] = std::max(widths[2], shown(r.defaultValue).size());
    widths[3] = std::max(widths[3], shown(r.value).size() + 2);  // room for the " *" mark
  }
  auto w = [&](int c) { return static_cast<int>(widths[c]); };
  std::printf("Parameters (* = set from the environment):\n");
  std::printf("  %-*s  %-*s  %-*s  %-*s  %s\n", w(0), headers[0], w(1), headers[1], w(2), headers[2], w(3), headers[3],
              "Description");
  for (const auto& r : rows) {
    std::string value = shown(r.value) + (r.fromEnv ? " *" : "");
    std::printf("  %-*s  %-*s  %-*s  %-*s  %s\n", w(0), r.env, w(1), r.type, w(2), shown(r.defaultValue).c_str(), w(3),
                value.c_str(), r.description);
  }
}

// The local topology, then the transport each kind of peer pair gets: the communicator's own list
// (makeTransports) asked in order, the first that can connect winning, as at init. Peers are described, not
// met: a same-host peer publishes what this process would, an other-host peer differs in its host hash.
void printTopo() {
  using collie::base::localTopology;
  const collie::base::Topology& topo = localTopology();
  std::printf("Topology:\n%s", collie::base::describeTopology(topo).c_str());
  int cpu = sched_getcpu();
  std::printf("  this process: CPU %d, NUMA node %d; progress thread %s\n", cpu, collie::base::currentNumaNode(),
              collie::base::params::pinThreads() ? "bound to the CPUs of the creating thread's NUMA node"
                                                 : "not bound (COLLIE_PIN_THREADS=0)");
  std::printf("\nTransport per peer pair (first in the list that can connect wins):\n");
  auto transports = collie::core::makeTransports();
  std::string order;
  for (auto& t : transports) order += (order.empty() ? "" : ", ") + std::string(t->name());
  std::printf("  transports, in order: %s\n", order.c_str());
  collie::transport::PeerInfo self = collie::core::localPeerInfo(0);
  for (auto& t : transports) {
    try {
      t->listen(self);
    } catch (const collie::Error& e) {
      std::printf("  %s: cannot listen here: %s\n", t->name(), e.what());
    }
  }
  struct Pair {
    const char* what;
    collie::transport::PeerInfo peer;
  };
  Pair pairs[] = {{"same host", self}, {"same host, other network namespace", self}, {"other host", self}};
  pairs[1].peer.netNs ^= 1;
  pairs[2].peer.hostHash ^= 1;
  for (Pair& p : pairs) {
    p.peer.rank = 1;
    const collie::transport::Transport* t = collie::transport::chooseTransport(transports, self, p.peer);
    const char* chosen = t ? t->name() : "none (no transport can reach it)";
    std::printf("  %-36s %s\n", p.what, chosen);
  }
}

// --tuner: what the tuner picks for N ranks whose links are of one transport kind, with the costs of
// COLLIE_TUNE_FILE when it has that kind, else the built-in ones (a communicator measures its own at init).
int gTunerRanks = 8;
std::string gTunerTransport = "tcp";
int gTunerHosts = 0;  // 0: one host (--nranks)
int gTunerPerHost = 1;
bool gTunerInterleaved = false;
int gTunerRanksPerCpu = 1;  // --ranks-per-cpu: ranks sharing each CPU (the communicator's cpuShare)

std::string sizeName(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f %s", bytes, units[u]);
  return buf;
}

std::string timeName(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof(buf), "%.1f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  return buf;
}

void printTuner() {
  constexpr size_t kFloat32Bytes = 4;  // the elements of the sizes printed
  using collie::algorithms::Algorithm;
  using collie::algorithms::Collective;
  namespace core = collie::core;
  namespace base = collie::base;
  core::MeasuredCosts costs;
  const std::string& file = base::params::tuneFile();
  bool fromFile = !file.empty() && core::readTuneFile(file, &costs) && costs.find(gTunerTransport) != nullptr;
  const bool hosts = gTunerHosts > 0;
  if (hosts) gTunerRanks = gTunerHosts * gTunerPerHost;
  const core::HostShape shape =
      hosts ? core::HostShape::uniform(gTunerHosts, gTunerPerHost, gTunerInterleaved) : core::HostShape{};
  core::CostModel model =
      hosts ? costs.modelForHosts(shape, "shm", gTunerTransport) : costs.modelFor({gTunerTransport});
  model.shareCpus(gTunerRanksPerCpu);
  core::Tuner tuner(model, core::currentAlgoSelection());
  std::printf(
      "Tuner for %d ranks over %s (alpha %.2f us, %.2f GB/s, gap %.2f us, reduction %.2f GB/s, %d ranks per CPU; "
      "%s%s%s)\n",
      gTunerRanks, gTunerTransport.c_str(), model.link.alpha * 1e6, 1e-9 / model.link.beta, model.link.gap * 1e6,
      1e-9 / model.gamma, gTunerRanksPerCpu, fromFile ? "from " : "built-in costs", fromFile ? file.c_str() : "",
      base::params::algo().empty() ? "" : (", COLLIE_ALGO=" + base::params::algo()).c_str());
  if (hosts)
    std::printf(
        "  on %d hosts x %d ranks (%s; %d flat-ring streams per host link): inside a host shm (alpha %.2f us, "
        "%.2f GB/s), between hosts %s (alpha %.2f us, %.2f GB/s)\n",
        gTunerHosts, gTunerPerHost, gTunerInterleaved ? "rank r on host r mod H" : "rank r on host r / L",
        shape.ringCrossings, model.intra.alpha * 1e6, 1e-9 / model.intra.beta, gTunerTransport.c_str(),
        model.inter.alpha * 1e6, 1e-9 / model.inter.beta);
  const Collective colls[] = {Collective::AllReduce, Collective::Broadcast, Collective::Reduce, Collective::AllGather,
                              Collective::ReduceScatter};
  std::printf("  %-9s", "size");
  for (Collective c : colls) std::printf("  %-17s", collie::algorithms::collectiveName(c));
  std::printf("  AllReduce estimates: ring / tree / rhd / direct / hier\n");
  for (double bytes = 8; bytes <= 1024.0 * 1024 * 1024; bytes *= 4) {
    auto b = static_cast<size_t>(bytes);
    std::printf("  %-9s", sizeName(bytes).c_str());
    for (Collective c : colls) {
      core::TunedPlan plan = tuner.choose(c, gTunerRanks, b, kFloat32Bytes);
      std::string cell = std::string(collie::algorithms::algorithmName(plan.algorithm)) + " " +
                         sizeName(static_cast<double>(plan.sliceBytes)) + "/" + std::to_string(plan.slicesInFlight);
      std::printf("  %-17s", cell.c_str());
    }
    auto estimate = [&](Algorithm a) {
      return timeName(tuner.cost(Collective::AllReduce, a, gTunerRanks, b, kFloat32Bytes));
    };
    std::printf("  %s / %s / %s / %s / %s\n", estimate(Algorithm::Ring).c_str(), estimate(Algorithm::Tree).c_str(),
                estimate(Algorithm::HalvingDoubling).c_str(), estimate(Algorithm::Direct).c_str(),
                estimate(Algorithm::Hierarchical).c_str());
  }
  std::printf(
      "  (cells: algorithm, slice size / slices in flight; float32 elements; sizes per rank for AllGather and "
      "ReduceScatter)\n");
}

// --ucx: whether the UCX transport is built, UCX's version, the transports UCX would use on this host (after
// UCX_TLS and UCX_NET_DEVICES), and what COLLIE_NET makes of them.
void printUcx() {
  std::printf("UCX transport:\n");
#if COLLIE_WITH_UCX
  const auto& info = collie::transport::ucx::ucxHostInfo();
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v && *v ? v : "(unset)");
  };
  std::printf("  built                yes, UCX %s\n", info.version.c_str());
  std::printf("  UCX_TLS              %s\n", env("UCX_TLS").c_str());
  std::printf("  UCX_NET_DEVICES      %s\n", env("UCX_NET_DEVICES").c_str());
  if (!info.error.empty()) std::printf("  UCX cannot start     %s\n", info.error.c_str());
  std::string list;
  for (const auto& r : info.resources) list += (list.empty() ? "" : ", ") + r;
  std::printf("  UCX would use        %s\n", list.empty() ? "(nothing)" : list.c_str());
  std::printf("  RDMA (rc, dc, ud)    %s\n", info.rdma ? "yes" : "no (no InfiniBand or RoCE device UCX can use)");
#else
  std::printf("  built                no (configured without libucx-dev, or with COLLIE_WITH_UCX=OFF)\n");
#endif
  const std::string& net = collie::base::params::net();
  bool ucx = false;
  try {
    ucx = collie::core::useUcx();
  } catch (const collie::Error& e) {
    std::printf("  COLLIE_NET=%s        fails at init: %s\n", net.c_str(), e.what());
    return;
  }
  std::printf("  COLLIE_NET=%-9s peers on other hosts use %s%s\n", net.c_str(), ucx ? "ucx" : "tcp",
              collie::base::params::shmDisable() ? " (so do same-host peers: COLLIE_SHM_DISABLE=1)"
                                                 : " (same-host peers: shm)");
}

void printAll() {
  printVersion();
  std::printf("\n");
  printBuild();
  std::printf("\n");
  printUcx();
  std::printf("\n");
  printParams();
  std::printf("\n");
  printTopo();
}

struct Section {
  const char* flag;
  const char* help;
  void (*print)();
};

const Section kSections[] = {
    {"--version", "print the version only", printVersion},
    {"--params", "print the COLLIE_* parameters only: default, current value, description", printParams},
    {"--tuner",
     "print the tuner's algorithm and slicing per collective and size (with --nranks N, default 8, and "
     "--transport tcp|shm, default tcp; or --hosts H --ranks-per-host L [--interleaved]: shm inside hosts; "
     "--ranks-per-cpu R, default 1: ranks sharing a CPU)",
     printTuner},
    {"--ucx", "print whether UCX is built, its version, the transports it would use here and COLLIE_NET's choice",
     printUcx},
    {"--topo", "print the topology (NUMA nodes, cores, GPUs, NICs) and the transport of each kind of peer pair",
     printTopo},
};

void usage(FILE* out, const char* prog) {
  std::fprintf(out, "Usage: %s [option]...\n", prog);
  std::fprintf(out, "Prints the version, the build options and every COLLIE_* parameter of collie.\n\n");
  std::fprintf(out, "  %-12s %s\n", "--help", "print this help");
  for (const Section& s : kSections) std::fprintf(out, "  %-12s %s\n", s.flag, s.help);
  std::fprintf(out, "\nWith no option, prints everything. Several options print their sections in order.\n");
}

}  // namespace

int main(int argc, char** argv) {
  const char* prog = argc > 0 ? argv[0] : "collie-info";
  // The transports whose costs the tuner knows (--transport); anything else would silently get tcp's defaults.
  static const char* const kTransports[] = {"tcp", "shm"};
  auto listTransports = [] {
    std::string list;
    for (const char* t : kTransports) list += (list.empty() ? "" : ", ") + std::string(t);
    return list;
  };
  auto listOptions = [] {
    std::string list =
        "--help, --nranks N, --transport T, --hosts H, --ranks-per-host L, --interleaved, --ranks-per-cpu R";
    for (const Section& s : kSections) list += std::string(", ") + s.flag;
    return list;
  };
  std::vector<const Section*> chosen;
  bool tunerArgs = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      usage(stdout, prog);
      return 0;
    }
    if (arg == "--interleaved") {
      gTunerInterleaved = true;
      tunerArgs = true;
      continue;
    }
    if (arg == "--hosts" || arg == "--ranks-per-host" || arg == "--ranks-per-cpu") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", prog, arg.c_str());
        return 2;
      }
      const char* value = argv[++i];
      char* end = nullptr;
      const long n = std::strtol(value, &end, 10);
      if (end == value || *end != '\0' || n < 1 || n > (1 << 16)) {
        std::fprintf(stderr, "%s: %s %s: expected a number in 1..65536\n", prog, arg.c_str(), value);
        return 2;
      }
      (arg == "--hosts"            ? gTunerHosts
       : arg == "--ranks-per-host" ? gTunerPerHost
                                   : gTunerRanksPerCpu) = static_cast<int>(n);
      tunerArgs = true;
      continue;
    }
    if (arg == "--nranks" || arg == "--transport") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", prog, arg.c_str());
        return 2;
      }
      const char* value = argv[++i];
      tunerArgs = true;
      if (arg == "--nranks") {
        char* end = nullptr;
        const long n = std::strtol(value, &end, 10);
        if (end == value || *end != '\0' || n < 1 || n > (1 << 20)) {
          std::fprintf(stderr, "%s: --nranks %s: expected a positive number\n", prog, value);
          return 2;
        }
        gTunerRanks = static_cast<int>(n);
      } else {
        bool known = false;
        for (const char* t : kTransports) known = known || std::strcmp(value, t) == 0;
        if (!known) {
          std::fprintf(stderr, "%s: unknown transport '%s' for --transport (valid: %s)\n", prog, value,
                       listTransports().c_str());
          return 2;
        }
        gTunerTransport = value;
      }
      continue;
    }
    const Section* match = nullptr;
    for (const Section& s : kSections) {
      if (arg == s.flag) match = &s;
    }
    if (match == nullptr) {
      std::fprintf(stderr, "%s: unknown option '%s' (valid: %s)\n\n", prog, arg.c_str(), listOptions().c_str());
      usage(stderr, prog);
      return 2;
    }
    chosen.push_back(match);
  }
  if (tunerArgs && std::find_if(chosen.begin(), chosen.end(), [](const Section* s) {
                     return std::strcmp(s->flag, "--tuner") == 0;
                   }) == chosen.end()) {
    std::fprintf(
        stderr,
        "%s: --nranks, --transport, --hosts, --ranks-per-host, --interleaved and --ranks-per-cpu only apply to "
        "--tuner\n",
        prog);
    return 2;
  }
  try {
    if (chosen.empty()) {
      printAll();
    } else {
      for (size_t i = 0; i < chosen.size(); ++i) {
        if (i > 0) std::printf("\n");
        chosen[i]->print();
      }
    }
  } catch (const collie::Error& e) {
    // A malformed COLLIE_* value (e.g. COLLIE_TIMEOUT=abc) is reported, not shown as if it were valid.
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 1;
  }
  return 0;
}
