// collie-sim: runs one collective on simulated ranks (src/sim/simulator.hpp: the real schedules and the
// real executor for every rank in one process, over in-memory links with an alpha-beta-gamma time model) and
// prints what it costs: steps and messages per rank, bytes sent per rank, and the estimated time.
//
//   collie-sim --coll allreduce --algo tree --nranks 1024 --bytes 64M
//   collie-sim --coll allreduce --algo all --nranks 96 --bytes 1M        every algorithm side by side
//   collie-sim --coll broadcast --algo tree --nranks 16 --bytes 1K --trace --rank 5   the plan of rank 5
//   collie-sim --coll allreduce --algo all --hosts 4 --ranks-per-host 8 --bytes 64M --gbps 0.125
//                                   32 ranks on 4 hosts: shm inside a host, the --transport link between hosts
//   collie-sim --init --ranks 1024,4096,32768,131072   init's messages, bytes, rounds, connections
//   (collie_sim_init.cpp)
//
// Large runs are simulated at a reduced scale: bytes, slices, beta and gamma divided and multiplied by the
// same power of two, which leaves the model's times unchanged up to rounding (the line "scale" says by how
// much); --check runs at full scale with per-rank data and verifies every rank's result instead.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "core/tuner.hpp"
#include "sim/simulator.hpp"

namespace {

using namespace collie;
using namespace collie::algorithms;
using namespace collie::sim;

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "Usage: %s --coll C --nranks N --bytes B [options]\n"
               "Simulates one collective on N ranks and prints steps, bytes sent per rank and the estimated time.\n\n"
               "  --coll C          allreduce, broadcast, reduce, allgather, reducescatter, alltoall\n"
               "  --algo A          ring, tree, rhd, direct, hier, auto (the tuner's choice, default) or all\n"
               "  --nranks N        number of ranks (1..65536)\n"
               "  --hosts H         put the ranks on H hosts (with --ranks-per-host L: N = H x L); inside a host\n"
               "                    the links cost shm's built-in costs, between hosts --transport's (or\n"
               "                    --alpha-us/--gbps), and each host has one network port each way\n"
               "  --ranks-per-host L  ranks per host (default 1)\n"
               "  --interleaved     rank r on host r mod H (the test bed); default: r / L\n"
               "  --bytes B         message size (K/M/G suffixes; per rank for allgather/reducescatter/alltoall)\n"
               "  --type T          element type (default float32; int32 with --check)\n"
               "  --op O            sum, prod, max, min, avg (default sum)\n"
               "  --root R          root of broadcast/reduce (default 0)\n"
               "  --slice B         slice bytes (default: the tuner's)\n"
               "  --inflight K      slices in flight per step (default: the tuner's)\n"
               "  --transport T     built-in link costs of tcp (default) or shm\n"
               "  --alpha-us X      latency per message hop, microseconds\n"
               "  --gbps X          port bandwidth, GB/s\n"
               "  --reduce-gbps X   host reduction speed, GB/s\n"
               "  --overhead-us X   time a message holds the ports besides its bytes (default 0), microseconds\n"
               "  --check           full scale with per-rank data; verify every rank's result\n"
               "  --trace           print the plan (schedule) of one rank; --rank R picks it (default 0)\n"
               "  --help\n"
               "or:    %s --init [--ranks 1024,4096,32768,131072] [--bytes B] [--sockets S]   init's costs at scale\n",
               prog, prog);
}

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024.0, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1024.0 * 1024, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = 1024.0 * 1024 * 1024, ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string humanTime(double s) {
  char buf[64];
  if (s < 1e-3)
    std::snprintf(buf, sizeof(buf), "%.2f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof(buf), "%.3f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.3f s", s);
  return buf;
}

// nccl-tests' bus bandwidth factor: what each rank's port must carry relative to the message size.
double busFactor(Collective coll, int n) {
  if (n <= 1) return 0;
  switch (coll) {
    case Collective::AllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
      return 1.0 * (n - 1) / n;
    default:
      return 1;
  }
}

struct Run {
  Algorithm algo;
  SimResult result;
  size_t slice = 0;
  int inflight = 0;
  int scale = 1;
};

}  // namespace

namespace collie::sim {
int runInitProjection(int argc, char** argv);  // collie_sim_init.cpp
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--init") return collie::sim::runInitProjection(argc, argv);
  const char* prog = argv[0];
  std::string collArg, algoArg = "auto", transportArg = "tcp";
  size_t bytes = 0, slice = 0;
  int nranks = 0, root = 0, inflight = 0, traceRank = 0, hosts = 0, perHost = 1;
  bool interleaved = false;
  bool check = false, trace = false, bytesGiven = false;
  double alphaUs = -1, gbps = -1, reduceGbps = -1, overheadUs = 0;
  DataType type = DataType::Float32;
  bool typeGiven = false;
  ReduceOp op = ReduceOp::Sum;
  auto need = [&](int& i) -> const char* {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", prog, argv[i]);
      std::exit(2);
    }
    return argv[++i];
  };
  auto bad = [&](const char* what, const char* v) {
    std::fprintf(stderr, "%s: invalid %s '%s' (see --help)\n", prog, what, v);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(stdout, prog);
      return 0;
    } else if (a == "--coll") {
      collArg = need(i);
    } else if (a == "--algo") {
      algoArg = need(i);
    } else if (a == "--nranks") {
      const char* v = need(i);
      nranks = std::atoi(v);
      if (nranks < 1 || nranks > 65536) bad("--nranks", v);
    } else if (a == "--hosts" || a == "--ranks-per-host") {
      const char* v = need(i);
      const int x = std::atoi(v);
      if (x < 1 || x > 65536) bad(a.c_str(), v);
      (a == "--hosts" ? hosts : perHost) = x;
    } else if (a == "--interleaved") {
      interleaved = true;
    } else if (a == "--bytes") {
      const char* v = need(i);
      if (!parseSize(v, &bytes)) bad("--bytes", v);
      bytesGiven = true;
    } else if (a == "--type") {
      const char* v = need(i);
      if (!base::parseDataType(v, &type)) bad("--type", v);
      typeGiven = true;
    } else if (a == "--op") {
      const char* v = need(i);
      if (!base::parseReduceOp(v, &op)) bad("--op", v);
    } else if (a == "--root") {
      root = std::atoi(need(i));
    } else if (a == "--slice") {
      const char* v = need(i);
      if (!parseSize(v, &slice) || slice == 0) bad("--slice", v);
    } else if (a == "--inflight") {
      const char* v = need(i);
      inflight = std::atoi(v);
      if (inflight < 1) bad("--inflight", v);
    } else if (a == "--transport") {
      transportArg = need(i);
    } else if (a == "--alpha-us") {
      alphaUs = std::atof(need(i));
    } else if (a == "--gbps") {
      gbps = std::atof(need(i));
    } else if (a == "--reduce-gbps") {
      reduceGbps = std::atof(need(i));
    } else if (a == "--overhead-us") {
      overheadUs = std::atof(need(i));
    } else if (a == "--check") {
      check = true;
    } else if (a == "--trace") {
      trace = true;
    } else if (a == "--rank") {
      traceRank = std::atoi(need(i));
    } else {
      std::fprintf(stderr, "%s: unknown option '%s'\n\n", prog, argv[i]);
      usage(stderr, prog);
      return 2;
    }
  }
  Collective coll;
  if (collArg.empty() || !parseCollective(collArg, &coll) || coll == Collective::Send || coll == Collective::Recv) {
    std::fprintf(stderr, "%s: --coll must name a collective (see --help)\n", prog);
    return 2;
  }
  if (hosts > 0) {
    if (nranks > 0 && nranks != hosts * perHost) {
      std::fprintf(stderr, "%s: --nranks %d is not --hosts %d x --ranks-per-host %d\n", prog, nranks, hosts, perHost);
      return 2;
    }
    nranks = hosts * perHost;
    if (nranks > 65536) bad("--hosts x --ranks-per-host", std::to_string(nranks).c_str());
  }
  if (nranks < 1 || !bytesGiven) {
    std::fprintf(stderr, "%s: --nranks and --bytes are required (see --help)\n", prog);
    return 2;
  }
  if (root < 0 || root >= nranks) bad("--root", std::to_string(root).c_str());
  if (traceRank < 0 || traceRank >= nranks) bad("--rank", std::to_string(traceRank).c_str());
  if (check && !typeGiven) type = DataType::Int32;
  const size_t elem = base::dataTypeSize(type);
  const size_t count = bytes / elem;

  const patterns::HostLayout layout = hosts == 0    ? patterns::HostLayout{}
                                      : interleaved ? patterns::HostLayout::roundRobin(nranks, hosts)
                                                    : patterns::HostLayout::blocks(nranks, perHost);
  // One host: every link is --transport's. Several: shm inside a host, --transport (and --alpha-us, --gbps)
  // between hosts.
  core::CostModel model = hosts > 1
                              ? core::MeasuredCosts{}.modelForHosts(core::HostShape::of(layout), "shm", transportArg)
                              : core::CostModel::defaults(transportArg);
  core::LinkCost& net = hosts > 1 ? model.inter : model.link;
  if (alphaUs >= 0) net.alpha = alphaUs * 1e-6;
  if (gbps > 0) net.beta = 1e-9 / gbps;
  if (hosts > 1) model.link = model.inter;  // the slowest link
  if (reduceGbps > 0) model.gamma = 1e-9 / reduceGbps;
  core::Tuner tuner(model, core::AlgoSelection{});

  std::vector<Algorithm> algos;
  if (algoArg == "all") {
    for (Algorithm a : kAllAlgorithms)
      if (supports(a, coll)) algos.push_back(a);
  } else if (algoArg == "auto") {
    algos.push_back(tuner.choose(coll, nranks, count * elem, elem).algorithm);
  } else {
    Algorithm a;
    if (!parseAlgorithm(algoArg, &a)) bad("--algo", algoArg.c_str());
    if (!supports(a, coll)) {
      std::fprintf(stderr, "%s: %s does not implement %s\n", prog, algorithmName(a), collectiveName(coll));
      return 2;
    }
    algos.push_back(a);
  }

  if (trace) {
    Schedule s = build(algos[0], ScheduleKey{coll, traceRank, nranks, count, root, elem}, layout);
    std::printf("%s %s, %d ranks, %zu elements of %s: plan of rank %d (%zu steps", collectiveName(coll),
                algorithmName(algos[0]), nranks, count, base::dataTypeName(type), traceRank, s.steps.size());
    if (s.scratchCount) std::printf(", scratch of %zu elements", s.scratchCount);
    std::printf(")\n%s", describe(s).c_str());
    return 0;
  }

  std::printf("%s, %d ranks, %s (%zu x %s), model: alpha %.2f us, %.2f GB/s ports, reduction %.2f GB/s\n",
              collectiveName(coll), nranks, human(static_cast<double>(count * elem)).c_str(), count,
              base::dataTypeName(type), model.link.alpha * 1e6, 1e-9 / model.link.beta, 1e-9 / model.gamma);
  if (hosts > 1)
    std::printf(
        "on %d hosts x %d ranks (%s): inside a host alpha %.2f us, %.2f GB/s; between hosts alpha %.2f us, "
        "%.2f GB/s per host port\n",
        hosts, perHost, interleaved ? "rank r on host r mod H" : "rank r on host r / L", model.intra.alpha * 1e6,
        1e-9 / model.intra.beta, model.inter.alpha * 1e6, 1e-9 / model.inter.beta);
  std::vector<Run> runs;
  try {
    for (Algorithm algo : algos) {
      Run run;
      run.algo = algo;
      core::chooseSlicing(coll, algo, model.transport, nranks, count * elem, &run.slice, &run.inflight);
      if (slice) run.slice = slice;
      if (inflight) run.inflight = inflight;
      sim::SimOptions o;
      o.coll = coll;
      o.algo = algo;
      o.nranks = nranks;
      o.count = count;
      o.root = root;
      o.type = type;
      o.op = op;
      o.sliceBytes = run.slice;
      o.slicesInFlight = run.inflight;
      o.cost = {model.link.alpha, model.link.beta, model.gamma, overheadUs * 1e-6};
      if (hosts > 1) {
        o.hosts = layout;
        o.cost = {model.intra.alpha, model.intra.beta, model.gamma, overheadUs * 1e-6};
        o.interHost = {model.inter.alpha, model.inter.beta, 0, overheadUs * 1e-6};
      }
      o.checkData = check;
      if (!check) {  // scale down while slices stay >= 256 bytes and every rank keeps >= 16 elements of a chunk
        while (run.slice / (2 * run.scale) >= 256 && count / (2 * run.scale) >= 16 * static_cast<size_t>(nranks))
          run.scale *= 2;
        o.count = count / run.scale;
        o.sliceBytes = run.slice / run.scale;
        o.cost.beta *= run.scale;
        o.cost.gamma *= run.scale;
        o.interHost.beta *= run.scale;
      }
      run.result = sim::simulate(o);
      if (!run.result.ok) {
        std::fprintf(stderr, "%s: %s: %s\n", prog, algorithmName(algo), run.result.error.c_str());
        return 1;
      }
      runs.push_back(run);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 2;
  }
  for (const Run& r : runs) {
    const SimResult& s = r.result;
    const double sent = static_cast<double>(s.maxBytesSent) * r.scale;
    const double avg = static_cast<double>(s.totalBytesSent) * r.scale / nranks;
    const double algbw = s.seconds > 0 ? static_cast<double>(count * elem) / s.seconds / 1e9 : 0;
    std::printf("\n%s%s\n", algorithmName(r.algo), algoArg == "auto" ? " (the tuner's choice)" : "");
    std::printf("  slices            %s, %d in flight%s\n", human(static_cast<double>(r.slice)).c_str(), r.inflight,
                r.scale > 1 ? (" (simulated at 1/" + std::to_string(r.scale) + " scale)").c_str() : "");
    std::printf("  steps per rank    %zu (most)\n", s.maxSteps);
    std::printf("  messages per rank %llu (most)\n", static_cast<unsigned long long>(s.maxMessages));
    std::printf("  bytes sent / rank %s most (rank %d), %s average\n", human(sent).c_str(), s.busiestRank,
                human(avg).c_str());
    std::printf("  estimated time    %s   algbw %.2f GB/s   busbw %.2f GB/s\n", humanTime(s.seconds).c_str(), algbw,
                algbw * busFactor(coll, nranks));
    std::printf("  tuner's estimate  %s\n", humanTime(tuner.cost(coll, r.algo, nranks, count * elem, elem)).c_str());
    if (check) std::printf("  check             every rank's result is exact\n");
  }
  return 0;
}
