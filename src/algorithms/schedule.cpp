#include "algorithms/schedule.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "base/errors.hpp"

namespace collie::algorithms {

const char* collectiveName(Collective coll) {
  switch (coll) {
    case Collective::AllReduce:
      return "AllReduce";
    case Collective::Broadcast:
      return "Broadcast";
    case Collective::Reduce:
      return "Reduce";
    case Collective::AllGather:
      return "AllGather";
    case Collective::ReduceScatter:
      return "ReduceScatter";
    case Collective::AllToAll:
      return "AllToAll";
    case Collective::Send:
      return "Send";
    case Collective::Recv:
      return "Recv";
  }
  return "?";
}

const char* algorithmName(Algorithm algo) {
  switch (algo) {
    case Algorithm::Ring:
      return "ring";
    case Algorithm::Direct:
      return "direct";
    case Algorithm::Tree:
      return "tree";
    case Algorithm::HalvingDoubling:
      return "rhd";
    case Algorithm::Hierarchical:
      return "hier";
  }
  return "?";
}

namespace {
std::string normalized(const std::string& name) {
  std::string s;
  for (char c : name) {
    if (c == '_' || c == '-' || c == ' ') continue;
    s += static_cast<char>(tolower(static_cast<unsigned char>(c)));
  }
  return s;
}
}  // namespace

bool parseAlgorithm(const std::string& name, Algorithm* algo) {
  std::string s = normalized(name);
  if (s == "halvingdoubling" || s == "recursivehalvingdoubling") s = "rhd";
  if (s == "hierarchical") s = "hier";
  for (Algorithm a : kAllAlgorithms) {
    if (s == algorithmName(a)) {
      *algo = a;
      return true;
    }
  }
  return false;
}

bool parseCollective(const std::string& name, Collective* coll) {
  static const Collective all[] = {Collective::AllReduce, Collective::Broadcast,     Collective::Reduce,
                                   Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll,
                                   Collective::Send,      Collective::Recv};
  std::string s = normalized(name);
  for (Collective c : all) {
    if (s == normalized(collectiveName(c))) {
      *coll = c;
      return true;
    }
  }
  return false;
}

size_t ScheduleIdHash::operator()(const ScheduleId& id) const {
  const ScheduleKey& s = id.second;
  size_t h = std::hash<size_t>{}(s.count);
  h = h * 31 + static_cast<size_t>(s.coll);
  h = h * 31 + static_cast<size_t>(id.first);
  h = h * 31 + static_cast<size_t>(s.rank);
  h = h * 31 + static_cast<size_t>(s.nranks);
  h = h * 31 + static_cast<size_t>(s.root);
  h = h * 31 + s.elemBytes;
  return h;
}

// The one place that says which algorithm implements which collective, for every number of ranks (each builder
// handles 1..n ranks). build() refuses any other pair, the tuner and COLLIE_ALGO forcing choose among these only.
bool supports(Algorithm algo, Collective coll) {
  switch (algo) {
    case Algorithm::Direct:
      return coll == Collective::AllReduce || coll == Collective::AllToAll || coll == Collective::Send ||
             coll == Collective::Recv;
    case Algorithm::Ring:
      return coll == Collective::AllReduce || coll == Collective::Broadcast || coll == Collective::Reduce ||
             coll == Collective::AllGather || coll == Collective::ReduceScatter;
    case Algorithm::Tree:
      return coll == Collective::AllReduce || coll == Collective::Broadcast || coll == Collective::Reduce;
    case Algorithm::HalvingDoubling:
      return coll == Collective::AllReduce || coll == Collective::AllGather || coll == Collective::ReduceScatter;
    case Algorithm::Hierarchical:
      return coll == Collective::AllReduce || coll == Collective::Broadcast || coll == Collective::Reduce ||
             coll == Collective::AllGather || coll == Collective::ReduceScatter;
  }
  return false;
}

namespace {
// Drops the steps that move nothing. Equivalent for the executor: an empty step starts and completes at once,
// so the step after it starts exactly when it would have. sliceAfter indices are renumbered. The one step of a
// Send or Recv stays: a send of 0 elements is a message of 0 bytes, as in NCCL and MPI, so that a receive from any
// source can take it and a count that differs between the two ends is a mismatch, not a receive that waits for the
// sender's next message (the two ends of any other schedule drop their empty steps alike).
void dropEmptySteps(Schedule& sch, Collective coll) {
  if (coll == Collective::Send || coll == Collective::Recv) return;
  std::vector<int> newIndex(sch.steps.size(), -1);
  size_t kept = 0;
  for (size_t i = 0; i < sch.steps.size(); ++i) {
    Step s = sch.steps[i];
    if (s.count == 0) continue;
    if (s.sliceAfter >= 0) s.sliceAfter = newIndex[static_cast<size_t>(s.sliceAfter)];
    newIndex[i] = static_cast<int>(kept);
    sch.steps[kept++] = s;
  }
  sch.steps.resize(kept);
}

// Every range a step reads or writes lies within its buffer's count: the executor sizes the copy of Input it reads
// for an Avg by inputCount (Executor::scaleInputAt), and Scratch by scratchCount.
void checkRanges(const Schedule& sch) {
  auto limit = [&](Buffer b) {
    return b == Buffer::Input     ? sch.inputCount
           : b == Buffer::Output  ? sch.outputCount
           : b == Buffer::Scratch ? sch.scratchCount
                                  : ~size_t{0};
  };
  for (const Step& s : sch.steps) {
    const bool writesDst = s.kind != StepKind::Send;
    for (const Range* r : {s.readsSrc() ? &s.src : nullptr, writesDst ? &s.dst : nullptr}) {
      COLLIE_INTERNAL_CHECK(!r || r->buffer == Buffer::Transient || r->offset + s.count <= limit(r->buffer),
                            "schedule step reaches element %zu of buffer %d, which holds %zu", r->offset + s.count,
                            static_cast<int>(r->buffer), limit(r->buffer));
    }
  }
}
}  // namespace

namespace {
// Whether every element of Input is read by at most one step (Schedule::inputReadOnce; the direct AllReduce's rank 0,
// say, copies its input twice, to the area it sends from and to its output).
bool inputReadOnce(const Schedule& sch) {
  std::vector<std::pair<size_t, size_t>> reads;  // [begin, end) of each step's source in the input
  for (const Step& s : sch.steps)
    if (s.readsSrc() && s.src.buffer == Buffer::Input) reads.emplace_back(s.src.offset, s.src.offset + s.count);
  std::sort(reads.begin(), reads.end());
  for (size_t i = 1; i < reads.size(); ++i)
    if (reads[i].first < reads[i - 1].second) return false;
  return true;
}
}  // namespace

void refuseUnsupported(Algorithm algo, Collective coll) {
  COLLIE_FAIL(ErrorCode::InvalidUsage, "algorithm %s does not implement %s (see algorithms::supports())",
              algorithmName(algo), collectiveName(coll));
}

Schedule build(Algorithm algo, const ScheduleKey& key, const patterns::HostLayout& hosts) {
  if (!supports(algo, key.coll)) refuseUnsupported(algo, key.coll);
  Schedule sch;
  switch (algo) {
    case Algorithm::Ring:
      sch = buildRing(key);
      break;
    case Algorithm::Direct:
      sch = buildDirect(key);
      break;
    case Algorithm::Tree:
      sch = buildTree(key);
      break;
    case Algorithm::HalvingDoubling:
      sch = buildHalvingDoubling(key);
      break;
    case Algorithm::Hierarchical:
      sch = buildHierarchical(key, hosts);
      break;
  }
  dropEmptySteps(sch, key.coll);
  checkRanges(sch);
  sch.inputReadOnce = inputReadOnce(sch);
  return sch;
}

namespace {
const char* kindName(StepKind kind) {
  switch (kind) {
    case StepKind::Send:
      return "Send";
    case StepKind::Recv:
      return "Recv";
    case StepKind::RecvReduce:
      return "RecvReduce";
    case StepKind::RecvReduceSend:
      return "RecvReduceSend";
    case StepKind::RecvCopySend:
      return "RecvCopySend";
    case StepKind::Copy:
      return "Copy";
  }
  return "?";
}
const char* bufferName(Buffer b) {
  switch (b) {
    case Buffer::Input:
      return "in";
    case Buffer::Output:
      return "out";
    case Buffer::Transient:
      return "slot";
    case Buffer::Scratch:
      return "scratch";
  }
  return "?";
}
}  // namespace

std::string describe(const Schedule& schedule) {
  std::string out;
  char buf[96];
  int i = 0;
  for (const Step& s : schedule.steps) {
    const bool readsSrc = s.readsSrc();
    snprintf(buf, sizeof(buf), "%3d %-15s", i++, kindName(s.kind));
    std::string line = buf;
    auto field = [&](const char* fmt, auto... args) {
      snprintf(buf, sizeof(buf), fmt, args...);
      line += buf;
    };
    std::string from = s.recvPeer >= 0 ? "from " + std::to_string(s.recvPeer) : "";
    std::string to = s.sendPeer >= 0 ? "to " + std::to_string(s.sendPeer) : "";
    field(" %-10s %-8s", from.c_str(), to.c_str());
    if (readsSrc) field(" src=%s+%zu", bufferName(s.src.buffer), s.src.offset);
    if (s.kind != StepKind::Send) field(" dst=%s+%zu", bufferName(s.dst.buffer), s.dst.offset);
    field(" count=%zu", s.count);
    if (s.sliceAfter >= 0) field(" after=%d", s.sliceAfter);
    if (s.overlapNext) line += " overlap";
    if (s.receivedFirst) line += " received-first";
    out += line + "\n";
  }
  return out;
}

}  // namespace collie::algorithms
