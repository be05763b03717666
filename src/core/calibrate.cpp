// Calibration of a communicator's tuner at init. Rank 0 decides the costs and broadcasts them, so every rank's
// tuner makes the same choices:
//   1. rank 0 reads COLLIE_TUNE_FILE (if set and present) and broadcasts what it knows;
//   2. for each transport kind rank 0 uses (tcp, shm, ...) and the file does not cover, rank 0 and its first
//      peer over that kind (a peer on another host where the kind reaches one: what limits the algorithms across
//      hosts) ping-pong; when one kind links rank 0 both to its own host and to others (COLLIE_SHM_DISABLE=1), its
//      first same-host peer is measured too, as "<kind>-intra". The pairs are the host-aware model's intra and
//      inter links (tuner.hpp): 8 bytes (alpha = half the round trip; the median of a few, since one descheduled
//      round trip can double a mean on a loaded host) and 4 MiB (beta = what the one-way time adds per byte; large
//      enough to leave the caches); then rank 0 sends 8 bytes to up to kFanOut peers over the same kind of link
//      (of those it is connected to already: fanOf) in one call, and each answers (gap = that call's time per
//      message: the CPU work of a message to one more peer, which the tuner charges where ranks share CPUs; a
//      burst to one peer would not show it, since its messages share one socket's system calls). Only these few
//      peers are talked to, whatever the number of ranks; rank 0 times the host reduction of 4 MiB (gamma); a
//      second broadcast shares the results and rank 0 writes them to COLLIE_TUNE_FILE. About 15 ms over loopback
//      TCP, a few over shm.
// COLLIE_TUNE_MEASURE=0 skips step 2 (built-in costs where the file has none).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"
#include "core/communicator.hpp"
#include "core/setup.hpp"

namespace collie::core {

using algorithms::Collective;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxKinds = 8;
constexpr int kFanOut = 4;

// What rank 0 broadcasts (plain data).
struct Wire {
  uint32_t measure = 0;  // 1: measure what `have` lacks
  uint32_t have[kMaxKinds] = {};
  double alpha[kMaxKinds] = {};
  double beta[kMaxKinds] = {};
  double gap[kMaxKinds] = {};
  int32_t fan[kMaxKinds][kFanOut] = {};  // the peers of rank 0's fan-out for each (-1: none)
  double gamma = 0;                      // 0: unknown
  int32_t hostCpus = 0;                  // rank 0's usable CPUs: the CPU share every rank's tuner uses
};

// The pairs rank 0 measures (see the top of the file), and which of them are the links inside and between hosts.
struct Probes {
  std::vector<std::string> keys;  // what each measurement is stored as in MeasuredCosts
  std::vector<int> partners;      // the peer of rank 0 for each
  std::string intraKey, intraKind, interKind;
};

Probes probesOf(const std::vector<std::unique_ptr<transport::Transport>>& transports,
                const std::vector<transport::PeerInfo>& peers, const algorithms::patterns::HostLayout& hosts) {
  Probes p;
  int intraPartner = -1;
  for (int r = 1; r < static_cast<int>(peers.size()); ++r) {
    const transport::Transport* t = transport::chooseTransport(transports, peers[0], peers[static_cast<size_t>(r)]);
    if (!t) continue;
    const std::string kind = t->name();
    const bool remote = !hosts.hostOf.empty() && hosts.hostOf[static_cast<size_t>(r)] != hosts.hostOf[0];
    auto at = static_cast<size_t>(std::find(p.keys.begin(), p.keys.end(), kind) - p.keys.begin());
    if (at == p.keys.size()) {
      p.keys.push_back(kind);
      p.partners.push_back(r);
    }
    if (remote && p.interKind.empty()) {
      p.interKind = kind;
      p.partners[at] = r;  // the kind is measured between hosts
    }
    if (!remote && p.intraKind.empty()) {
      p.intraKind = kind;
      intraPartner = r;
    }
  }
  p.intraKey = p.intraKind.empty() ? "shm" : p.intraKind;
  if (!p.intraKind.empty() && p.intraKind == p.interKind) {
    p.intraKey = p.intraKind + "-intra";
    p.keys.push_back(p.intraKey);
    p.partners.push_back(intraPartner);
  }
  return p;
}

// Rank 0's fan-out for each link (step 2 of the file comment): the ping-pong partner and up to kFanOut - 1 more
// peers over the same kind of link on the same side of the host boundary, among those rank 0 is connected to
// already (under lazy connection the measurement adds no link; a fan of one leaves the gap unknown).
void fanOf(const Probes& probes, const Links& links, const algorithms::patterns::HostLayout& hosts,
           int32_t (&fan)[kMaxKinds][kFanOut]) {
  const auto& peers = links.ctx.peers;
  auto remote = [&](size_t r) { return !hosts.hostOf.empty() && hosts.hostOf[r] != hosts.hostOf[0]; };
  for (size_t k = 0; k < probes.keys.size(); ++k) {
    const auto partner = static_cast<size_t>(probes.partners[k]);
    const transport::Transport* kind = transport::chooseTransport(links.transports, peers[0], peers[partner]);
    int n = 0;
    fan[k][n++] = static_cast<int32_t>(partner);
    for (size_t r = 1; r < peers.size() && n < kFanOut; ++r) {
      if (r == partner || remote(r) != remote(partner) || !links.conns[r]) continue;
      const transport::Transport* t = transport::chooseTransport(links.transports, peers[0], peers[r]);
      if (t && kind && t->name() == kind->name()) fan[k][n++] = static_cast<int32_t>(r);
    }
    while (n < kFanOut) fan[k][n++] = -1;
  }
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double timeReduce() {
  constexpr size_t kCount = 1024 * 1024;
  std::vector<float> a(kCount, 1.0f), b(kCount, 2.0f);
  base::reduce(a.data(), a.data(), b.data(), kCount, DataType::Float32, ReduceOp::Sum);  // warm up
  constexpr int kIters = 3;
  auto start = Clock::now();
  for (int i = 0; i < kIters; ++i) base::reduce(a.data(), a.data(), b.data(), kCount, DataType::Float32, ReduceOp::Sum);
  return seconds(Clock::now() - start) / kIters / static_cast<double>(kCount * sizeof(float));
}

}  // namespace

void CommImpl::calibrate(const std::vector<transport::PeerInfo>& peers) {
  const std::vector<std::string> kinds = kindsInUse(links_.transports, peers);
  const Probes probes = probesOf(links_.transports, peers, planner_.hosts());
  const std::vector<std::string>& keys = probes.keys;
  COLLIE_INTERNAL_CHECK(keys.size() <= kMaxKinds, "%zu links to measure", keys.size());
  if (kinds.empty()) {  // one rank: nothing to measure
    planner_.tuner().setModel(costModel(kinds));
    return;
  }
  const std::vector<int>& partner = probes.partners;

  Wire w;
  MeasuredCosts file;
  const std::string& path = base::params::tuneFile();
  if (rank_ == 0) {
    try {
      if (!path.empty() && readTuneFile(path, &file))
        COLLIE_INFO(base::kLogTune, "%s: tuning costs read from %s", name_.c_str(), path.c_str());
    } catch (const Error& e) {
      COLLIE_WARN(base::kLogTune, "%s: ignoring the tuning file: %s", name_.c_str(), e.what());
      file = MeasuredCosts{};
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      if (const LinkCost* c = file.find(keys[k])) {
        w.have[k] = 1;
        w.alpha[k] = c->alpha;
        w.beta[k] = c->beta;
        w.gap[k] = c->gap;
      }
    }
    w.gamma = file.gamma;
    w.hostCpus = usableCpus();
    w.measure = base::params::tuneMeasure() != 0 ? 1 : 0;
    fanOf(probes, links_, planner_.hosts(), w.fan);
  }
  auto broadcastWire = [&] {
    OpDesc op;
    op.coll = Collective::Broadcast;
    op.send = op.recv = &w;
    op.count = sizeof(w);
    op.type = DataType::Uint8;
    op.root = 0;
    run(op);
  };
  broadcastWire();

  bool measuring = false;
  if (w.measure) {
    for (size_t k = 0; k < keys.size(); ++k) {
      if (w.have[k]) continue;
      measuring = true;
      if (rank_ == 0 || rank_ == partner[k]) pingPong(rank_ == 0 ? partner[k] : 0, &w.alpha[k], &w.beta[k]);
      std::vector<int> fan;
      for (int i = 0; i < kFanOut && w.fan[k][i] >= 0; ++i) fan.push_back(w.fan[k][i]);
      if (rank_ == 0 || std::find(fan.begin(), fan.end(), rank_) != fan.end()) fanOut(fan, &w.gap[k]);
    }
    if (w.gamma == 0) {
      measuring = true;
      if (rank_ == 0) w.gamma = timeReduce();
    }
  }
  if (measuring) {
    broadcastWire();
    if (rank_ == 0 && !path.empty()) {
      for (size_t k = 0; k < keys.size(); ++k) file.set(keys[k], LinkCost{w.alpha[k], w.beta[k], w.gap[k]});
      file.gamma = w.gamma;
      try {
        writeTuneFile(path, file);
      } catch (const Error& e) {
        COLLIE_WARN(base::kLogTune, "%s: %s", name_.c_str(), e.what());
      }
    }
  }
  for (size_t k = 0; k < keys.size(); ++k)
    if (w.have[k] || measuring) measured_.set(keys[k], LinkCost{w.alpha[k], w.beta[k], w.gap[k]});
  measured_.gamma = w.gamma;
  measured_.hostCpus = w.hostCpus;
  planner_.tuner().setModel(costModel(kinds));
  const CostModel& m = planner_.tuner().model();
  COLLIE_INFO(base::kLogTune,
              "%s: cost model (%s): alpha %.2f us, beta %.4f ns/B (%.2f GB/s), gap %.2f us, gamma %.4f ns/B (beta and "
              "gamma x %.2f: ranks of the fullest host per CPU of rank 0's host)",
              name_.c_str(), m.transport.c_str(), m.link.alpha * 1e6, m.link.beta * 1e9,
              m.link.beta > 0 ? 1e-9 / m.link.beta : 0.0, m.link.gap * 1e6, m.gamma * 1e9, m.cpuShare);
  if (m.shape.hosts > 1)
    COLLIE_INFO(base::kLogTune,
                "%s: %d hosts, up to %d ranks each (%d flat-ring streams per host link); inside a host (%s): alpha "
                "%.2f us, beta %.4f ns/B, gap %.2f us; between hosts (%s): alpha %.2f us, beta %.4f ns/B, gap %.2f us",
                name_.c_str(), m.shape.hosts, m.shape.maxLocal, m.shape.ringCrossings, probes.intraKey.c_str(),
                m.intra.alpha * 1e6, m.intra.beta * 1e9, m.intra.gap * 1e6, probes.interKind.c_str(),
                m.inter.alpha * 1e6, m.inter.beta * 1e9, m.inter.gap * 1e6);
}

// Measured with one pair of ranks, beta and gamma are what a rank moves and reduces with a CPU to itself. With
// more ranks on a host than CPUs, every rank's copies and reductions queue for the same CPUs, so each byte costs
// cpuShare times more while a hop's latency does not grow the same way. Without this, the tuner kept
// latency-bound plans far past their crossover there (8 ranks on 2 CPUs: direct AllReduce chosen at 32 KiB, 1.6x
// slower than rhd; measured crossover 8-16 KiB).
// Across hosts, the link inside a host is scaled the same way; the network's is not (a rank's CPU outpaces it).
// Every rank must price alike (its tuner's choice is the schedule it runs, and the peers' must be the same): the
// share is the fullest host's ranks over the CPUs rank 0 counted, from the table and the calibration broadcast,
// not this rank's own host and CPUs (which differ where hosts are uneven or a rank is pinned: ranks then ran
// different algorithms for one call, and some returned wrong sums before the fingerprint carried the algorithm).
CostModel CommImpl::costModel(const std::vector<std::string>& kinds) const {
  CostModel m = measured_.modelFor(kinds);
  m.shape = HostShape::of(planner_.hosts());
  if (m.shape.hosts > 1 && links_.ctx.peers.size() == static_cast<size_t>(nranks_)) {
    const Probes probes = probesOf(links_.transports, links_.ctx.peers, planner_.hosts());
    auto cost = [&](const std::string& key, const std::string& kind) {
      const LinkCost* c = measured_.find(key);
      return c ? *c : CostModel::defaults(kind).link;
    };
    m.intra = cost(probes.intraKey, probes.intraKind.empty() ? "shm" : probes.intraKind);
    m.inter = cost(probes.interKind, probes.interKind);
  }
  const double share = measured_.hostCpus > 0 ? static_cast<double>(m.shape.maxLocal) / measured_.hostCpus : 1.0;
  m.shareCpus(share);
  return m;
}

namespace {
double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

// One side of a bounce with `peer`, `iters` times: the initiator sends `bytes` and receives them back. Seconds per
// iteration.
double CommImpl::bounce(int peer, bool initiator, std::vector<char>& buf, size_t bytes, int iters) {
  OpDesc send, recv;
  send.coll = Collective::Send;
  recv.coll = Collective::Recv;
  send.send = buf.data();
  recv.recv = buf.data();
  send.count = recv.count = bytes;
  send.type = recv.type = DataType::Uint8;
  send.root = recv.root = peer;
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    run(initiator ? send : recv);
    run(initiator ? recv : send);
  }
  return seconds(Clock::now() - start) / iters;
}

// Rank 0 (the initiator) and `peer` bounce messages; the initiator gets alpha and beta.
void CommImpl::pingPong(int peer, double* alpha, double* beta) {
  constexpr int kTurns = 5;
  const bool initiator = rank_ == 0;
  std::vector<char> buf(4 << 20, 0);
  bounce(peer, initiator, buf, 8, 2);  // warm up
  std::vector<double> roundTrips;
  for (int i = 0; i < kTurns; ++i) roundTrips.push_back(bounce(peer, initiator, buf, 8, 2));
  bounce(peer, initiator, buf, buf.size(), 1);
  const double large = bounce(peer, initiator, buf, buf.size(), 2) / 2;
  if (!initiator) return;
  const double small = median(roundTrips) / 2;  // one way
  *alpha = small;
  *beta = large > small ? (large - small) / static_cast<double>(buf.size()) : CostModel::defaults("tcp").link.beta;
}

// Rank 0 sends 8 bytes to every rank of `fan` in one call and receives their answers in another; rank 0 gets gap:
// the first call's time per message, the CPU work of posting a message to one more peer (at least 1 ns, so that it
// reads as measured). A fan of one peer leaves gap unknown (0).
void CommImpl::fanOut(const std::vector<int>& fan, double* gap) {
  constexpr int kTurns = 5;
  if (fan.size() < 2) return;
  std::vector<char> buf(8 * fan.size(), 0);
  std::vector<OpDesc> sends, recvs;
  for (size_t i = 0; i < fan.size(); ++i) {
    OpDesc send, recv;
    send.coll = Collective::Send;
    recv.coll = Collective::Recv;
    send.send = recv.recv = buf.data() + 8 * i;
    send.count = recv.count = 8;
    send.type = recv.type = DataType::Uint8;
    send.root = recv.root = rank_ == 0 ? fan[i] : 0;
    sends.push_back(send);
    recvs.push_back(recv);
    if (rank_ != 0 && fan[i] == rank_) {  // one peer of the fan: answer rank 0
      for (int t = 0; t < kTurns + 1; ++t) {
        run(recv);
        run(send);
      }
      return;
    }
  }
  if (rank_ != 0) return;
  std::vector<double> posts;
  for (int t = 0; t < kTurns + 1; ++t) {  // the first warms up
    auto start = Clock::now();
    execute(sends, execConfig_);
    if (t > 0) posts.push_back(seconds(Clock::now() - start));
    execute(recvs, execConfig_);
  }
  *gap = std::max(1e-9, median(posts) / static_cast<double>(fan.size()));
}

}  // namespace collie::core
