#include "core/tuner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <vector>

#include "algorithms/patterns/halving_doubling.hpp"
#include "algorithms/patterns/tree.hpp"
#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"

namespace collie::core {

using algorithms::Algorithm;
using algorithms::Collective;

namespace {
std::string trimmed(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}
}  // namespace

// ---- Costs -------------------------------------------------------------------------------------------------------

CostModel CostModel::defaults(const std::string& transport) {
  CostModel m;
  m.transport = transport;
  if (transport == "shm") {
    m.link = {3e-6, 1.0 / 8e9};  // a few microseconds, one memory copy at ~8 GB/s
  } else {
    m.link = {30e-6, 1.0 / 2e9};  // loopback or a fast network: tens of microseconds, ~2 GB/s
  }
  m.gamma = 1.0 / 8e9;  // host reduction of float32 sums at ~8 GB/s
  m.intra = m.inter = m.link;
  return m;
}

void CostModel::shareCpus(double share) {
  cpuShare = std::max(1.0, share);
  link.beta *= cpuShare;
  intra.beta *= cpuShare;
  gamma *= cpuShare;
}

double CostModel::queuedWake(double rounds) const { return (cpuShare - 1) * rounds * kWakeSeconds; }

const LinkCost* MeasuredCosts::find(const std::string& kind) const {
  for (const auto& [name, cost] : links)
    if (name == kind) return &cost;
  return nullptr;
}

void MeasuredCosts::set(const std::string& kind, LinkCost cost) {
  for (auto& [name, c] : links) {
    if (name == kind) {
      c = cost;
      return;
    }
  }
  links.emplace_back(kind, cost);
}

CostModel MeasuredCosts::modelFor(const std::vector<std::string>& kinds) const {
  CostModel model = CostModel::defaults(kinds.empty() ? "shm" : kinds[0]);
  if (gamma > 0) model.gamma = gamma;
  bool first = true;
  for (const std::string& kind : kinds) {
    const LinkCost* m = find(kind);
    LinkCost c = m ? *m : CostModel::defaults(kind).link;
    if (first || c.beta > model.link.beta) model.transport = kind;
    model.link.alpha = first ? c.alpha : std::max(model.link.alpha, c.alpha);
    model.link.beta = first ? c.beta : std::max(model.link.beta, c.beta);
    model.link.gap = first ? c.gap : std::max(model.link.gap, c.gap);
    first = false;
  }
  model.intra = model.inter = model.link;
  return model;
}

CostModel MeasuredCosts::modelForHosts(const HostShape& shape, const std::string& intraKind,
                                       const std::string& interKind) const {
  if (shape.hosts <= 1) return modelFor({intraKind});
  CostModel m = modelFor({intraKind, interKind});
  auto cost = [&](const std::string& kind) {
    const LinkCost* c = find(kind);
    return c ? *c : CostModel::defaults(kind).link;
  };
  m.intra = cost(intraKind);
  m.inter = cost(interKind);
  m.shape = shape;
  return m;
}

namespace {
/// One non-empty, comment-free line of a tuning file into `costs`; false when it is malformed.
bool parseTuneLine(const std::string& line, MeasuredCosts* costs) {
  if (line.find('\0') != std::string::npos) return false;  // sscanf would stop at the NUL
  auto cost = [](double v) { return std::isfinite(v) && v >= 0; };
  char name[64] = {0};
  char rest = 0;  // anything after the last number makes the line malformed
  double a = 0, b = 0, g = 0;
  if (sscanf(line.c_str(), " reduce gamma_ns_per_byte=%lf %c", &a, &rest) == 1) {
    if (!cost(a)) return false;
    costs->gamma = a * 1e-9;
    return true;
  }
  const int got =
      sscanf(line.c_str(), " %63s alpha_us=%lf beta_ns_per_byte=%lf gap_us=%lf %c", name, &a, &b, &g, &rest);
  if (got == 3) {  // without gap_us: nothing may follow beta
    if (sscanf(line.c_str(), " %63s alpha_us=%lf beta_ns_per_byte=%lf %c", name, &a, &b, &rest) != 3) return false;
  } else if (got != 4) {
    return false;
  }
  if (!cost(a) || !cost(b) || !cost(g)) return false;
  costs->set(name, LinkCost{a * 1e-6, b * 1e-9, g * 1e-6});
  return true;
}
}  // namespace

void parseTuneText(const std::string& text, const std::string& source, MeasuredCosts* costs) {
  MeasuredCosts parsed = *costs;  // all or nothing: a bad line leaves *costs as it was
  int lineNo = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = std::min(text.find('\n', pos), text.size());
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineNo;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trimmed(line);
    COLLIE_ARG_CHECK(line.empty() || parseTuneLine(line, &parsed),
                     "COLLIE_TUNE_FILE: %s:%d: expected '<transport> alpha_us=<x> beta_ns_per_byte=<y>' or "
                     "'reduce gamma_ns_per_byte=<z>' (each a finite number >= 0), got '%s'",
                     source.c_str(), lineNo, line.c_str());
  }
  *costs = std::move(parsed);
}

bool readTuneFile(const std::string& path, MeasuredCosts* costs) {
  FILE* f = fopen(path.c_str(), "r");
  if (!f) return false;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  fclose(f);
  parseTuneText(text, path, costs);
  return true;
}

void writeTuneFile(const std::string& path, const MeasuredCosts& costs) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = fopen(tmp.c_str(), "w");
  COLLIE_ENFORCE(f != nullptr, ErrorCode::SystemError, "COLLIE_TUNE_FILE: cannot write %s: %s", tmp.c_str(),
                 base::errnoString(errno).c_str());
  fprintf(f, "# collie tuning file (COLLIE_TUNE_FILE): measured costs, read by every communicator's rank 0\n");
  for (const auto& [name, c] : costs.links) {
    fprintf(f, "%s alpha_us=%.3f beta_ns_per_byte=%.5f", name.c_str(), c.alpha * 1e6, c.beta * 1e9);
    if (c.gap > 0) fprintf(f, " gap_us=%.3f", c.gap * 1e6);
    fprintf(f, "\n");
  }
  if (costs.gamma > 0) fprintf(f, "reduce gamma_ns_per_byte=%.5f\n", costs.gamma * 1e9);
  bool ok = fclose(f) == 0;
  ok = ok && rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) unlink(tmp.c_str());
  COLLIE_ENFORCE(ok, ErrorCode::SystemError, "COLLIE_TUNE_FILE: cannot write %s: %s", path.c_str(),
                 base::errnoString(errno).c_str());
}

HostShape HostShape::of(const algorithms::patterns::HostLayout& layout) {
  HostShape s;
  s.hosts = layout.nhosts();
  s.maxLocal = layout.hostOf.empty() ? 1 : layout.maxLocal;
  s.ringCrossings = layout.ringCrossings();
  const int n = static_cast<int>(layout.hostOf.size());
  if (s.hosts > 1) {
    const algorithms::patterns::HalvingDoubling hd(n);
    for (int d = hd.pof2 / 2; d >= 1; d /= 2) {
      std::vector<int> out(static_cast<size_t>(s.hosts), 0);
      int most = 0;
      for (int v = 0; v < hd.pof2; ++v) {
        const int h = layout.hostOf[static_cast<size_t>(hd.rankOf(v))];
        if (h != layout.hostOf[static_cast<size_t>(hd.rankOf(v ^ d))])
          most = std::max(most, ++out[static_cast<size_t>(h)]);
      }
      s.rhdCrossings.push_back(most);
    }
  }
  return s;
}

HostShape HostShape::uniform(int hosts, int perHost, bool interleaved) {
  const int n = std::max(1, hosts) * std::max(1, perHost);
  return of(interleaved ? algorithms::patterns::HostLayout::roundRobin(n, std::max(1, hosts))
                        : algorithms::patterns::HostLayout::blocks(n, std::max(1, perHost)));
}

double hierarchicalSeconds(const CostModel& m, Collective coll, int nranks, size_t bytes, size_t sliceBytes,
                           size_t elemBytes) {
  if (nranks <= 1) return 0;
  const bool multi = m.shape.hosts > 1;
  const double H = multi ? m.shape.hosts : 1, L = multi ? m.shape.maxLocal : nranks;
  const double S = static_cast<double>(bytes), shard = S / L;
  const double slice = static_cast<double>(std::max<size_t>(sliceBytes, 1));
  const LinkCost intra = multi ? m.intra : m.link, inter = m.inter;
  if (coll == Collective::AllGather || coll == Collective::ReduceScatter) {
    // S is one rank's block. One ring per rank of a host between the hosts (H-1 hops; the host's link carries
    // L (H-1) blocks) and one exchange inside the host, in which each rank passes the H blocks of its shard to the
    // L-1 others; ReduceScatter folds those H (L-1) blocks inside the host, then H-1 more along its ring.
    // Each message costs its CPU work where ranks share CPUs, as for AllReduce: the L-1 of the exchange, the H-1
    // of the ring.
    double t = L > 1 ? (1 + (L - 2) / 4) * intra.alpha + (L - 1) * H * S * intra.beta : 0;
    if (H > 1) t += (H - 1) * inter.alpha + L * (H - 1) * S * inter.beta;
    if (coll == Collective::ReduceScatter) t += ((L - 1) * H + (H - 1)) * S * m.gamma;
    t += m.queuedCpu(L - 1, intra.gap) + (H > 1 ? m.queuedCpu(H - 1, inter.gap) : 0);
    t += m.queuedWake((L > 1 ? 1 : 0) + (H - 1));
    return t;
  }
  // One exchange inside a host (reduce-scatter, scatter or all-gather): the L-1 messages go out at once (alpha
  // for the first, a quarter for each further one, as for direct); each rank moves (L-1)/L of the buffer.
  const double round = L > 1 ? (1 + (L - 2) / 4) * intra.alpha + (L - 1) / L * S * intra.beta : 0;
  // Between hosts the L ranks of a host share its link: together they move what one rank per host would.
  double t = 2 * round;
  if (coll == Collective::AllReduce) {
    t += (L - 1) / L * S * m.gamma;
    if (H > 1) t += 2 * (H - 1) * inter.alpha + 2 * (H - 1) / H * S * inter.beta + (H - 1) / H * shard * m.gamma;
    // Fewer elements than shards leave shards empty, and no message carries one: the ranks that own an empty shard
    // sit out most of the call, so the owners share each CPU with fewer others (their own rounds take as long). On
    // the test bed, 2 hosts x 4 ranks on 2 CPUs, 2 float32 elements took 37-54 us against 63-81 us for 4 (medians
    // of 5 and 15, RESULTS.md).
    const double elements = static_cast<double>(bytes / std::max<size_t>(elemBytes, 1));
    CostModel busy = m;
    busy.cpuShare = std::max(1.0, m.cpuShare * std::max(1.0, std::min(L, elements)) / L);
    t += busy.queuedCpu(2 * (L - 1), intra.gap) + (H > 1 ? busy.queuedCpu(2 * (H - 1), inter.gap) : 0);
    t += busy.queuedWake((L > 1 ? 2 : 0) + 2 * (H - 1));
  } else if ((coll == Collective::Broadcast || coll == Collective::Reduce) && H > 1) {
    t += (H - 1) * inter.alpha + (S + (H - 2) * std::min(slice, shard) * L) * inter.beta;  // pipelined chains
  }
  if (coll == Collective::Reduce) t += S * m.gamma;  // inside the host, then along the chain
  return t;
}

double estimate(const CostModel& model, const CostTerms& t) {
  return t.steps * model.link.alpha + t.bytes * model.link.beta + t.reducedBytes * model.gamma +
         model.queuedCpu(t.messages, model.link.gap);
}

namespace {
// Halving-doubling across hosts, round by round (HostShape::rhdCrossings): a round whose pairs stay inside their
// hosts costs intra's alpha and beta; one that leaves a host costs inter's alpha, and its bytes inter's beta times
// the participants of one host that cross at once. The round at distance d moves d/p of the whole buffer each way
// (AllReduce: `bytes`; AllGather, ReduceScatter: the n blocks of `bytes`); AllReduce runs every round twice
// (reduce-scatter, then all-gather). Each round's message costs its CPU work where ranks share CPUs (queuedCpu),
// for every collective, as hier's messages do. `flat` prices the folding of extra ranks.
// A round that leaves the hosts moves its pieces at once: about 1 ms of a host port's rate passes as a burst (tbf's
// burst on the test bed); beyond that, measured on the test bed, the round's streams reach 0.8-0.85 of the rate that
// the hierarchical algorithm's pipelined ring sustains on the same ports (AllReduce 4 hosts x 2 ranks from 1 MiB;
// RESULTS.md). The simulator's ports have no such limit.
constexpr double kPortBurstSeconds = 1e-3;
constexpr double kCrossingRoundRate = 0.85;
double rhdAcrossHosts(const CostModel& m, const CostModel& flat, Collective coll, int nranks, size_t bytes) {
  const algorithms::patterns::HalvingDoubling hd(nranks);
  const bool allReduce = coll == Collective::AllReduce;
  // A small AllReduce runs as recursive doubling: each round (the same distances) moves and folds the whole buffer.
  const bool doubling = allReduce && algorithms::patterns::allReduceByRecursiveDoubling(bytes);
  const double S = static_cast<double>(bytes) * (allReduce ? 1 : nranks), p = hd.pof2;
  const double times = allReduce && !doubling ? 2 : 1;
  const double folds = doubling ? algorithms::patterns::treeDepth(hd.pof2) : (p - 1) / p;  // buffers reduced
  double t = coll == Collective::AllGather ? 0 : folds * S * m.gamma;
  int round = 0;
  for (int d = hd.pof2 / 2; d >= 1; d /= 2, ++round) {
    const size_t k = static_cast<size_t>(round);
    const int crossing = k < m.shape.rhdCrossings.size() ? m.shape.rhdCrossings[k] : m.shape.maxLocal;
    const double piece = doubling ? S : S * d / p;
    const LinkCost& link = crossing > 0 ? m.inter : m.intra;
    const double port = piece * link.beta * std::max(1, crossing);  // the host port's time for the round
    const double slower = crossing > 0 ? std::max(0.0, port - kPortBurstSeconds) * (1 / kCrossingRoundRate - 1) : 0;
    t += times * (link.alpha + port + slower + m.queuedCpu(1, link.gap) + m.queuedWake(1));  // one message per round
  }
  if (hd.extra > 0)  // fold in (AllGather: a block), result back (ReduceScatter: a block)
    t += 2 * flat.link.alpha + (allReduce ? 2 * S : S + S / nranks) * flat.link.beta +
         (coll == Collective::AllGather ? 0 : S) * m.gamma + m.queuedCpu(2, flat.link.gap);
  return t;
}
}  // namespace

CostTerms costTerms(Collective coll, Algorithm algo, int nranks, size_t bytes, size_t sliceBytes) {
  CostTerms t;
  if (nranks <= 1) return t;
  const double n = nranks, S = static_cast<double>(bytes), slice = static_cast<double>(std::max<size_t>(sliceBytes, 1));
  const double depth = algorithms::patterns::treeDepth(nranks);
  const algorithms::patterns::HalvingDoubling hd(nranks);
  const double p = hd.pof2, logp = algorithms::patterns::treeDepth(hd.pof2), fold = hd.extra > 0 ? 1 : 0;
  switch (coll) {
    case Collective::AllReduce:
      if (algo == Algorithm::Ring) {
        t = {2 * (n - 1), 2 * (n - 1) / n * S, (n - 1) / n * S, 2 * (n - 1)};
      } else if (algo == Algorithm::Tree) {
        // Up and down overlap; an inner node moves 2S through each port; the pipeline fills over 2 x depth
        // levels, two slices per level at a node with two children.
        // Messages: up and down each tree, a node sends one up in each and two down in the one where it is inner.
        t = {2 * depth, 2 * S + 4 * depth * std::min(slice, S / 2), S, std::min(4.0, 2 * (n - 1))};
      } else if (algo == Algorithm::HalvingDoubling) {
        t = {2 * logp + 2 * fold, 2 * (p - 1) / p * S + fold * S, (p - 1) / p * S + fold * S, 2 * logp + 2 * fold};
      } else if (algo == Algorithm::Direct) {
        // One round: the n-1 messages go out at once, so the first pays alpha and each further one only its
        // posting and polling, taken as alpha/4. Measured (8 ranks on 2 CPUs over shm, 8 B): direct 10.6 us,
        // rhd 20 us, tree 24 us, though this model's 2.5 alpha against 6 alpha would predict even more.
        // Local work: n-1 folds plus two copies of the input (to scratch, to the output), costed like a fold.
        t = {1 + (n - 2) / 4, (n - 1) * S, (n + 1) * S, n - 1};
      }
      break;
    case Collective::Broadcast:
    case Collective::Reduce: {
      const double reduced = coll == Collective::Reduce ? S : 0;
      if (algo == Algorithm::Ring) {
        t = {n - 1, S + (n - 2) * std::min(slice, S), reduced};  // a chain, pipelined
      } else if (algo == Algorithm::Tree) {
        t = {depth + 1, S + 2 * (depth + 1) * std::min(slice, S / 2), reduced};
      }
      break;
    }
    case Collective::AllGather:
    case Collective::ReduceScatter: {
      const double reduce = coll == Collective::ReduceScatter ? 1 : 0;
      if (algo == Algorithm::Ring) {
        t = {n - 1, (n - 1) * S, reduce * (n - 1) * S};
      } else if (algo == Algorithm::HalvingDoubling) {
        // The rank that absorbs an extra one also moves the extra rank's whole buffer.
        t = {logp + 2 * fold, (n - 1) * S + fold * n * S, reduce * ((n - 1) * S + fold * n * S)};
      }
      break;
    }
    case Collective::AllToAll:
      t = {n - 1, (n - 1) * S, 0};
      break;
    case Collective::Send:
    case Collective::Recv:
      t = {1, S, 0};
      break;
  }
  return t;
}

// ---- Slicing -----------------------------------------------------------------------------------------------------

void chooseSlicing(Collective coll, Algorithm algo, const std::string& transport, int nranks, size_t bytes,
                   size_t* sliceBytes, int* slicesInFlight) {
  const size_t n = static_cast<size_t>(std::max(1, nranks));
  // The piece one step moves, and how many slices it should be cut into so that the next hop can start early.
  size_t piece = bytes, parts = 4, lo = 64 * 1024, hi = 1024 * 1024;
  switch (algo) {
    case Algorithm::Ring:
      if (coll == Collective::AllReduce) piece = bytes / n;
      if (coll == Collective::Broadcast || coll == Collective::Reduce) parts = 8;  // a chain of n-1 hops
      break;
    case Algorithm::Tree:
      piece = bytes / 2;  // half on each tree
      parts = 8;          // the pipeline is 2 x depth levels deep
      lo = 32 * 1024;
      hi = 512 * 1024;
      break;
    case Algorithm::HalvingDoubling:
      piece = coll == Collective::AllReduce ? bytes / 2 : bytes * n / 2;  // the first round moves half
      break;
    case Algorithm::Direct:
      break;
    case Algorithm::Hierarchical:
      // The ring between hosts moves a shard's chunks: bytes / (ranks per host x hosts); for AllGather and
      // ReduceScatter a rank's block (bytes).
      if (coll != Collective::AllGather && coll != Collective::ReduceScatter) piece = bytes / n;
      break;
  }
  // Measured with perf/all_reduce_perf on 2 and 4 processes (2 cores): over tcp, 4 KiB slices lose 2-3x to
  // per-slice overhead (a syscall each), 16 KiB ~15%, 64 KiB - 4 MiB are alike; over shm, 16 KiB - 1 MiB are
  // alike (+-10%); 1 to 8 slices in flight differ by less than the noise. Over a network, pipelining is what
  // makes a chain or a tree stream (collie-sim shows (n-1)x for an unsliced chain), so pieces are cut in 4-8.
  // Two ranks over tcp write at most 256 KiB per sendmsg, then read (TcpTransport::sendBurstFor). Their ring's
  // slices up to a 2 MiB half are then best at 128 KiB: 2 and 4 MiB AllReduce 10-30% faster than with 256 and
  // 512 KiB slices, most in the machine's slow minutes; from an 8 MiB message the larger slices lead again.
  if (transport == "tcp" && n == 2 && algo == Algorithm::Ring && piece <= 2 * 1024 * 1024) hi = 128 * 1024;
  const int inflight = 4;
  size_t slice = std::clamp<size_t>(std::max<size_t>(piece, 1) / parts, lo, hi);
  int64_t forced = base::params::sliceBytes();
  *sliceBytes = forced > 0 ? static_cast<size_t>(forced) : slice;
  int64_t forcedInflight = base::params::slicesInFlight();
  *slicesInFlight = forcedInflight > 0 ? static_cast<int>(forcedInflight) : inflight;
}

// ---- COLLIE_ALGO ---------------------------------------------------------------------------------------------

namespace {

std::string trim(const std::string& s) { return trimmed(s); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    parts.push_back(trim(s.substr(start, at == std::string::npos ? std::string::npos : at - start)));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return parts;
}

uint8_t bit(Algorithm a) { return static_cast<uint8_t>(1u << static_cast<unsigned>(a)); }

std::mutex gOverrideMu;
std::optional<std::string> gOverride;

}  // namespace

AlgoSelection AlgoSelection::parse(const std::string& spec) {
  AlgoSelection sel;
  sel.spec_ = spec;
  uint8_t global = 0xff;
  int explicitMask[kColls];
  std::fill(explicitMask, explicitMask + kColls, -1);
  for (const std::string& section : split(spec, ';')) {
    if (section.empty()) continue;
    size_t colon = section.find(':');
    std::string collName = colon == std::string::npos ? "" : trim(section.substr(0, colon));
    std::string list = colon == std::string::npos ? section : trim(section.substr(colon + 1));
    bool negate = !list.empty() && list[0] == '^';
    if (negate) list = trim(list.substr(1));
    uint8_t mask = 0;
    for (const std::string& name : split(list, ',')) {
      Algorithm a;
      COLLIE_ARG_CHECK(algorithms::parseAlgorithm(name, &a),
                       "COLLIE_ALGO='%s': unknown algorithm '%s' (known: ring, tree, rhd, direct, hier)", spec.c_str(),
                       name.c_str());
      mask |= bit(a);
    }
    if (negate) mask = static_cast<uint8_t>(~mask);
    if (collName.empty()) {
      global = mask;
    } else {
      Collective c;
      COLLIE_ARG_CHECK(algorithms::parseCollective(collName, &c),
                       "COLLIE_ALGO='%s': unknown collective '%s' (known: allreduce, broadcast, reduce, allgather, "
                       "reducescatter, alltoall)",
                       spec.c_str(), collName.c_str());
      explicitMask[static_cast<int>(c)] = mask;
    }
  }
  for (int c = 0; c < kColls; ++c) sel.mask_[c] = explicitMask[c] >= 0 ? static_cast<uint8_t>(explicitMask[c]) : global;
  return sel;
}

bool AlgoSelection::allowed(Collective coll, Algorithm algo) const {
  return (mask_[static_cast<int>(coll)] & bit(algo)) != 0;
}

AlgoSelection currentAlgoSelection() {
  {
    std::lock_guard<std::mutex> lock(gOverrideMu);
    if (gOverride) return AlgoSelection::parse(*gOverride);
  }
  return AlgoSelection::parse(base::params::algo());
}

void setAlgoOverride(const std::optional<std::string>& spec) {
  if (spec) AlgoSelection::parse(*spec);
  std::lock_guard<std::mutex> lock(gOverrideMu);
  gOverride = spec;
}

void validateAlgoParam() { AlgoSelection::parse(base::params::algo()); }

// ---- Choice --------------------------------------------------------------------------------------------------

double Tuner::cost(Collective coll, Algorithm algo, int nranks, size_t bytes, size_t elemBytes) const {
  size_t slice = 0;
  int inflight = 0;
  chooseSlicing(coll, algo, model_.transport, nranks, bytes, &slice, &inflight);
  if (algo == Algorithm::Hierarchical) return hierarchicalSeconds(model_, coll, nranks, bytes, slice, elemBytes);
  CostTerms terms = costTerms(coll, algo, nranks, bytes, slice);
  if (model_.shape.hosts <= 1) {
    // Halving-doubling's small AllReduce runs as recursive doubling (rhd.cpp): log2 p rounds of one whole message.
    // On one host over a network transport (tcp, ucx) it is priced so, which makes it auto's choice where ranks
    // share the CPUs (4 ranks on 2 CPUs, 8 B-2 KiB: tcp 22-30 us against direct's 37-54; UCX over its tcp 71-76
    // against 103-207, perf/RESULTS.md). Elsewhere it keeps the price of the halving form, which overestimates it:
    // over shm direct stays ahead (4 ranks, 8 B: 3.3 us against 4.5), and across hosts rhdAcrossHosts prices the
    // rounds. (UCX over its own shared memory alone, COLLIE_SHM_DISABLE=1 UCX_TLS=sm, is priced as a network too,
    // and loses 15-25% to direct up to 128 B there.) With 2 or 3 ranks (2 participants) it is direct's one
    // exchange, which stays the choice.
    const bool network = model_.transport == "tcp" || model_.transport == "ucx";
    if (algo == Algorithm::HalvingDoubling && coll == Collective::AllReduce && network && nranks >= 4 &&
        algorithms::patterns::allReduceByRecursiveDoubling(bytes)) {
      const algorithms::patterns::HalvingDoubling hd(nranks);
      const double rounds = algorithms::patterns::treeDepth(hd.pof2), fold = hd.extra > 0 ? 1 : 0;
      const double S = static_cast<double>(bytes);
      terms = {rounds + 2 * fold, (rounds + fold) * S, (rounds + fold + 1) * S, rounds + fold};  // + the first copy
    }
    return estimate(model_, terms);
  }
  // A flat algorithm across hosts: its hops pay the network's latency, and the streams that leave a host at once
  // share that host's link.
  // A byte costs the host link's share or the CPU's copy (intra's beta, scaled by the ranks per CPU), whichever is
  // dearer; not the network's beta scaled by ranks per CPU (shareCpus: a rank's CPU outpaces the network).
  const double share = algo == Algorithm::Ring ? std::max(1, model_.shape.ringCrossings) : model_.shape.maxLocal;
  CostModel flat = model_;
  flat.link.alpha = std::max(model_.link.alpha, model_.inter.alpha);
  flat.link.beta = std::max(model_.intra.beta, model_.inter.beta * share);
  flat.link.gap = std::max(model_.link.gap, model_.inter.gap);
  if (algo == Algorithm::HalvingDoubling) return rhdAcrossHosts(model_, flat, coll, nranks, bytes);
  return estimate(flat, terms) + model_.queuedWake(terms.steps);
}

TunedPlan Tuner::choose(Collective coll, int nranks, size_t bytes, size_t elemBytes) const {
  TunedPlan plan;
  bool found = false;
  for (int pass = 0; pass < 2 && !found; ++pass) {  // pass 1: COLLIE_ALGO allows nothing that implements coll
    if (pass == 1) {  // as NCCL_ALGO does: fall back to the supported algorithms instead of failing the call
      COLLIE_INFO(base::kLogTune, "COLLIE_ALGO='%s' allows no algorithm that implements %s; choosing among all",
                  selection_.spec().c_str(), algorithms::collectiveName(coll));
    }
    // On one host the hierarchical schedule is a direct exchange inside it, which the measured algorithms beat:
    // it is chosen there only when nothing else is allowed.
    const bool oneHost = model_.shape.hosts <= 1;
    bool others = false;
    for (Algorithm a : algorithms::kAllAlgorithms)
      others |=
          a != Algorithm::Hierarchical && algorithms::supports(a, coll) && (pass == 1 || selection_.allowed(coll, a));
    for (Algorithm a : algorithms::kAllAlgorithms) {
      if (!algorithms::supports(a, coll) || (pass == 0 && !selection_.allowed(coll, a))) continue;
      if (a == Algorithm::Hierarchical && oneHost && others) continue;
      double c = cost(coll, a, nranks, bytes, elemBytes);
      if (!found || c < plan.estimatedSeconds) {
        plan.algorithm = a;
        plan.estimatedSeconds = c;
        found = true;
      }
    }
  }
  chooseSlicing(coll, plan.algorithm, model_.transport, nranks, bytes, &plan.sliceBytes, &plan.slicesInFlight);
  return plan;
}

}  // namespace collie::core
