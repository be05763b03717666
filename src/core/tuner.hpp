// The tuner: which algorithm runs a call and how it is pipelined.
//
// Cost model (one formula for every collective and algorithm, with terms from costTerms()):
//   time = steps x alpha + bytes x beta + reducedBytes x gamma
// steps: message hops on the critical path; bytes: bytes through the busiest rank's port, plus the pipeline
// fill of pipelined algorithms (depth x slice); reducedBytes: bytes the busiest rank reduces. alpha and beta
// belong to the transport kind the communicator's collectives are limited by (its slowest, measured at init by
// a ping-pong or read from COLLIE_TUNE_FILE), gamma to the host reduction. The cheapest algorithm that
// implements the collective and that COLLIE_ALGO allows wins.
//
// With more ranks on a host than CPUs (cpuShare, ranks per CPU), a message's CPU work (the `gap` of its link: what
// each further message of a burst adds, measured at init; for tcp the system calls and the network stack, which
// on a loopback or a veth run on the sender's CPU too) waits for the other ranks' messages on the same CPUs:
// AllReduce adds (cpuShare - 1) x 2 gap (send and receive) per message a rank sends. Bytes are scaled the same way
// (beta and gamma x cpuShare, calibrate.cpp). On the test bed (8 ranks on 2 CPUs, tcp 20 us and gap 8 us between
// network namespaces) this is what ranks the algorithms at small sizes: direct's 7 messages per rank cost more
// than rhd's 6 hops, though one round against six.
//
// Across hosts (HostShape: hosts, ranks per host) the model has two links: `intra` between ranks of one host and
// `inter` between hosts, each measured at init by one pair of ranks (calibrate.cpp). The ranks of a host share its
// network link: a flat algorithm's bytes cost inter's beta times the streams that leave one host at once (the flat
// ring's crossings of the host boundary, and each halving-doubling round's, measured on the layout; every rank of the
// host for the others; the CPU's copy, intra's beta, where that is dearer); a halving-doubling round (AllReduce,
// AllGather, ReduceScatter) whose pairs all stay inside their hosts costs intra's alpha and beta, one that leaves them
// moves its pieces at once and, beyond a port's burst, gets less of its rate than a pipelined ring (measured); the
// hierarchical algorithm's phases cost intra inside a host and inter (times the ranks of a host, each carrying its
// shards) between hosts (hierarchicalSeconds).
//
// Across hosts, where ranks share CPUs, each round that waits for a message also waits for the woken rank's turn:
// (cpuShare - 1) x kWakeSeconds per round (queuedWake). On the test bed this is what tells halving-doubling's
// sequential rounds from hier's exchange of L-1 messages at once, and recursive doubling (log2 p rounds) from hier's
// four phases. It is not priced on one host, whose crossovers were measured with the model as it stands (perf/).
//
// Every choice depends only on what all ranks agree on (collective, nranks, bytes, the cost model that rank 0
// measured and broadcast, COLLIE_ALGO), so both ends of every link decide alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithms.hpp"

namespace collie::core {

/// A rank woken by a message on a CPU that other ranks share waits for each of them to be switched in and out:
/// a pipe round trip between two processes on one CPU of the test bed's machine took 5.0-5.4 us (two switches;
/// perf/cpu_turn.cpp).
inline constexpr double kWakeSeconds = 5e-6;

/// Costs of one transport kind.
struct LinkCost {
  double alpha = 0;  ///< seconds per message hop (latency and per-message overhead)
  double beta = 0;   ///< seconds per byte
  double gap = 0;    ///< seconds of a sender's CPU per further message of a burst; 0: unknown (no CPU term)
};

/// How a communicator's ranks sit on hosts, as far as the cost model needs it.
struct HostShape {
  int hosts = 1;
  int maxLocal = 1;       ///< the most ranks on one host
  int ringCrossings = 0;  ///< flat-ring streams that leave one host (the most over the hosts)
  /// Halving-doubling AllReduce, per reduce-scatter round (distance pof2/2, pof2/4, ..., 1; the all-gather
  /// repeats them backwards): participants of one host whose partner is on another host, the most over the hosts
  /// (0: the round stays inside the hosts). Empty: unknown, every round leaves every host.
  std::vector<int> rhdCrossings;
  static HostShape of(const algorithms::patterns::HostLayout& layout);
  /// `hosts` hosts of `perHost` ranks each; interleaved: rank r on host r mod hosts (the test bed), else r / perHost.
  static HostShape uniform(int hosts, int perHost, bool interleaved);
};

/// What the cost model knows about a communicator.
struct CostModel {
  std::string transport = "tcp";  ///< the kind whose costs are used (the slowest the communicator uses)
  LinkCost link;
  double gamma = 0;     ///< seconds per byte reduced on the host
  HostShape shape;      ///< one host: only `link` is used
  LinkCost intra;       ///< between ranks of one host (shape.hosts > 1)
  LinkCost inter;       ///< between hosts (shape.hosts > 1)
  double cpuShare = 1;  ///< ranks per CPU on this host (>= 1): a message's CPU work waits for cpuShare - 1 others'
  /// The CPU work of `messages` sent per rank over a link of `gap` that waits for the other ranks of the CPU.
  double queuedCpu(double messages, double gap) const { return (cpuShare - 1) * 2 * messages * gap; }
  /// What `rounds` rounds that each wait for a message add where ranks share CPUs: the woken rank waits for each
  /// other rank of its CPU to be switched in and out (kWakeSeconds). Priced across hosts only (Tuner::cost).
  double queuedWake(double rounds) const;
  /// Built-in costs of a transport kind ("tcp", "shm", anything else gets tcp's): used until measured.
  static CostModel defaults(const std::string& transport);
  /// `share` ranks per CPU (>= 1) on this host: sets cpuShare and scales what the CPUs do per byte (beta of the
  /// flat and intra links, gamma) by it; the network's beta (inter) is not scaled (a rank's CPU outpaces it).
  void shareCpus(double share);
};

/// Costs per transport kind and of the host reduction, as measured at init or read from a tuning file.
struct MeasuredCosts {
  std::vector<std::pair<std::string, LinkCost>> links;  ///< by transport kind name
  double gamma = 0;                                     ///< 0: unknown
  /// CPUs per host as every rank of the communicator agreed at init (rank 0's, calibrate.cpp), 0: unknown. The
  /// tuner's CPU share is the fullest host's ranks over this, the same on every rank: a share from each rank's own
  /// CPUs and host made ranks choose different algorithms for one call.
  int hostCpus = 0;
  const LinkCost* find(const std::string& kind) const;
  void set(const std::string& kind, LinkCost cost);
  /// The model of a communicator whose links use `kinds`: alpha and beta of the slowest kind (each the largest
  /// over the kinds), built-in defaults for kinds not measured. Empty `kinds` (one rank): shm's defaults.
  CostModel modelFor(const std::vector<std::string>& kinds) const;
  /// The model of ranks placed as `shape`, linked by `intraKind` inside a host and `interKind` between hosts (for
  /// the tools: a communicator measures its own links, calibrate.cpp).
  CostModel modelForHosts(const HostShape& shape, const std::string& intraKind, const std::string& interKind) const;
};

/// Tuning file (COLLIE_TUNE_FILE), one line per transport kind (gap_us optional) and one for the reduction:
///   tcp alpha_us=28.5 beta_ns_per_byte=0.41 gap_us=9.2
///   reduce gamma_ns_per_byte=0.09
/// '#' starts a comment. readTuneFile returns false when the file does not exist; a malformed line throws
/// InvalidArgument naming the file and the line.
bool readTuneFile(const std::string& path, MeasuredCosts* costs);
/// The parser behind readTuneFile, on the file's text (`source` names it in messages): all lines or none are
/// taken; numbers must be finite and >= 0.
void parseTuneText(const std::string& text, const std::string& source, MeasuredCosts* costs);
/// Writes every entry of `costs` (atomically: a temporary file renamed over `path`).
void writeTuneFile(const std::string& path, const MeasuredCosts& costs);

/// The terms of the cost formula for one call (see the file comment).
struct CostTerms {
  double steps = 0;
  double bytes = 0;
  double reducedBytes = 0;
  double messages = 0;  ///< messages a rank sends (AllReduce): their CPU work (CostModel::queuedCpu)
};
/// `bytes` is the user-visible size (count x element size; per rank for AllGather/ReduceScatter/AllToAll).
CostTerms costTerms(algorithms::Collective coll, algorithms::Algorithm algo, int nranks, size_t bytes,
                    size_t sliceBytes);
double estimate(const CostModel& model, const CostTerms& terms);
/// The model's time of the hierarchical algorithm (its phases inside and between hosts, one after the other).
/// `elemBytes`: one element's size (shards hold whole elements, so a small AllReduce may leave some empty).
double hierarchicalSeconds(const CostModel& model, algorithms::Collective coll, int nranks, size_t bytes,
                           size_t sliceBytes, size_t elemBytes = 1);

/// COLLIE_ALGO in NCCL's grammar: "ring", "tree,ring", "^tree" (all but), "allreduce:rhd;broadcast:tree"
/// (per collective; collectives not named are free). Names: ring, tree, rhd, direct, hier; collectives: allreduce,
/// broadcast, reduce, allgather, reducescatter, alltoall. A collective whose allowed algorithms implement none
/// of it falls back to the free choice.
class AlgoSelection {
 public:
  /// Throws InvalidArgument naming COLLIE_ALGO and the bad part.
  static AlgoSelection parse(const std::string& spec);
  bool allowed(algorithms::Collective coll, algorithms::Algorithm algo) const;
  /// The spec it was parsed from.
  const std::string& spec() const { return spec_; }

 private:
  static constexpr int kColls = 8;
  uint8_t mask_[kColls] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // bit per Algorithm
  std::string spec_;
};

/// The COLLIE_ALGO selection new communicators use: the test override if set, else the environment.
AlgoSelection currentAlgoSelection();
/// Tests: replaces COLLIE_ALGO for communicators created from now on (nullopt: back to the environment).
/// Parsed at once (throws InvalidArgument).
void setAlgoOverride(const std::optional<std::string>& spec);
/// Checks COLLIE_ALGO; throws InvalidArgument naming the variable if it asks for something unknown.
void validateAlgoParam();

struct TunedPlan {
  algorithms::Algorithm algorithm = algorithms::Algorithm::Ring;
  size_t sliceBytes = 0;
  int slicesInFlight = 0;
  double estimatedSeconds = 0;
};

/// Slice size and slices in flight for an algorithm on a transport kind (COLLIE_SLICE_BYTES and
/// COLLIE_SLICES_IN_FLIGHT override them).
void chooseSlicing(algorithms::Collective coll, algorithms::Algorithm algo, const std::string& transport, int nranks,
                   size_t bytes, size_t* sliceBytes, int* slicesInFlight);

class Tuner {
 public:
  Tuner() : Tuner(CostModel::defaults("tcp"), AlgoSelection{}) {}
  Tuner(CostModel model, AlgoSelection selection) : model_(std::move(model)), selection_(std::move(selection)) {}

  /// The plan for one call of `bytes` in elements of `elemBytes`: the cheapest allowed algorithm, and its slicing.
  TunedPlan choose(algorithms::Collective coll, int nranks, size_t bytes, size_t elemBytes = 1) const;
  /// The model's time for one algorithm (which must implement coll), with the slicing it would get.
  double cost(algorithms::Collective coll, algorithms::Algorithm algo, int nranks, size_t bytes,
              size_t elemBytes = 1) const;

  const CostModel& model() const { return model_; }
  void setModel(CostModel model) { model_ = std::move(model); }
  const AlgoSelection& selection() const { return selection_; }

 private:
  CostModel model_;
  AlgoSelection selection_;
};

}  // namespace collie::core
