// Call fingerprints: encoding and description (see call_fingerprint.hpp).
#include "core/call_fingerprint.hpp"

#include <algorithm>

#include "algorithms/algorithms.hpp"
#include "base/datatypes.hpp"
#include "base/errors.hpp"

namespace collie::core {

using algorithms::Collective;
using transport::Fingerprint;

namespace {

constexpr uint64_t kCountBits = 40;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr unsigned kTagShift = 40;
constexpr unsigned kCollShift = 52, kTypeShift = 56, kOpShift = 60;
constexpr unsigned kLastColl = static_cast<unsigned>(Collective::Recv);
constexpr unsigned kBarrierCode = kLastColl + 2;  // the collective code of barrier()'s AllReduce
// A collective's root field: root + 1 in bits 0-27, the algorithm that runs it + 1 in bits 28-31.
constexpr uint32_t kRootMask = (uint32_t{1} << 28) - 1;
constexpr unsigned kAlgoShift = 28;

bool reduces(Collective c) {
  return c == Collective::AllReduce || c == Collective::Reduce || c == Collective::ReduceScatter;
}
bool rooted(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

struct Decoded {
  bool known = false;  // the collective code is one of ours
  bool barrier = false;
  Collective coll = Collective::AllReduce;
  unsigned algo = 0;  // algorithm + 1, 0: none (send/receive)
  int64_t root = -1;  // root, receiving rank for send/receive; -1: none
  unsigned type = 0;
  unsigned op = 0;  // op + 1, 0: none
  uint64_t count = 0;
  uint32_t tag = 0;
};

Decoded decode(const Fingerprint& fp) {
  Decoded d;
  const unsigned coll = static_cast<unsigned>(fp.shape >> kCollShift) & 15u;
  d.barrier = coll == kBarrierCode;
  d.known = (coll >= 1 && coll <= kLastColl + 1) || d.barrier;
  d.coll = static_cast<Collective>(d.known && !d.barrier ? coll - 1 : 0);
  const bool p2p = d.known && (d.coll == Collective::Send || d.coll == Collective::Recv);
  d.algo = p2p ? 0 : fp.root >> kAlgoShift;
  d.root = static_cast<int64_t>(p2p ? fp.root : fp.root & kRootMask) - 1;  // any 32 bits from a peer: no overflow
  d.type = static_cast<unsigned>(fp.shape >> kTypeShift) & 15u;
  d.op = static_cast<unsigned>(fp.shape >> kOpShift) & 15u;
  d.count = fp.shape & kCountMask;
  d.tag = static_cast<uint32_t>(fp.shape >> kTagShift) & kMaxCommTag;
  return d;
}

}  // namespace

Fingerprint fingerprintOf(const OpDesc& op, uint32_t call, int rank, uint32_t tag, int algorithm) {
  const bool p2p = op.coll == Collective::Send || op.coll == Collective::Recv;
  const Collective coll = p2p ? Collective::Send : op.coll;  // a pair is described as the sender sees it
  Fingerprint fp;
  fp.call = call;
  if (p2p) {
    fp.root = static_cast<uint32_t>((op.coll == Collective::Send ? op.root : rank) + 1);
  } else {
    if (rooted(op.coll)) fp.root = static_cast<uint32_t>(op.root + 1) & kRootMask;
    fp.root |= static_cast<uint32_t>(algorithm + 1) << kAlgoShift;
  }
  const uint64_t count = std::min<uint64_t>(op.count, kCountMask);
  const uint64_t opCode = reduces(coll) ? static_cast<uint64_t>(op.op) + 1 : 0;
  const uint64_t collCode = op.barrier ? kBarrierCode : static_cast<uint64_t>(coll) + 1;
  fp.shape = count | static_cast<uint64_t>(tag & kMaxCommTag) << kTagShift | collCode << kCollShift |
             (static_cast<uint64_t>(op.type) & 15u) << kTypeShift | (opCode & 15u) << kOpShift;
  return fp;
}

bool isSendTo(const Fingerprint& fp, int rank) {
  const Decoded d = decode(fp);
  return d.known && d.coll == Collective::Send && d.root == rank;
}

bool isCollectiveFingerprint(const Fingerprint& fp) {
  const Decoded d = decode(fp);
  return d.known && d.coll != Collective::Send && d.coll != Collective::Recv;
}

uint32_t communicatorTag(const Fingerprint& fp) { return decode(fp).tag; }

bool contradicts(const Fingerprint& theirs, const Fingerprint& mine) {
  return isCollectiveFingerprint(theirs) && isCollectiveFingerprint(mine) && theirs.call == mine.call &&
         decode(theirs).tag == decode(mine).tag && theirs != mine;
}

std::string callText(const Fingerprint& fp, int rank, int other) {
  const Decoded d = decode(fp);
  if (fp.shape == 0) return "a call without a fingerprint";
  if (!d.known) {
    return base::format("an unknown call {call #%u, root %u, shape 0x%016llx}", fp.call, fp.root,
                        static_cast<unsigned long long>(fp.shape));
  }
  const char* type = base::dataTypeName(static_cast<DataType>(d.type));
  const unsigned long long count = d.count;
  const std::string comm =
      d.tag == 0 ? std::string()
                 : base::format(" on the communicator tagged %u (split to share its parent's connections)", d.tag);
  if (d.coll == Collective::Send || d.coll == Collective::Recv) {
    const long long receiver = d.root;
    if (receiver == rank) {
      return base::format("Recv(%s, %llu from rank %d) as receive #%u from rank %d%s", type, count, other, fp.call,
                          other, comm.c_str());
    }
    return base::format("Send(%s, %llu to rank %lld) as send #%u to rank %lld%s", type, count, receiver, fp.call,
                        receiver, comm.c_str());
  }
  if (d.barrier) return base::format("Barrier() as call #%u%s", fp.call, comm.c_str());
  std::string args = type;
  if (d.op != 0) args += std::string(", ") + base::reduceOpName(static_cast<ReduceOp>(d.op - 1));
  args += base::format(", %llu", count);
  if (d.root >= 0) args += base::format(", root %lld", static_cast<long long>(d.root));
  return base::format("%s(%s) as call #%u%s", algorithms::collectiveName(d.coll), args.c_str(), fp.call, comm.c_str());
}

std::string describeCall(const Fingerprint& fp, int rank, int other) {
  return base::format("rank %d called %s", rank, callText(fp, rank, other).c_str());
}

std::string describeMismatch(const transport::MismatchRecord& r) {
  const bool aFirst = r.rankA <= r.rankB;
  const std::string a = describeCall(r.a, r.rankA, r.rankB), b = describeCall(r.b, r.rankB, r.rankA);
  const Decoded da = decode(r.a), db = decode(r.b);
  if (r.a.call == r.b.call && r.a.shape == r.b.shape && da.root == db.root && da.algo != db.algo) {
    auto by = [](const Decoded& d) {
      return d.algo == 0 || d.algo > static_cast<unsigned>(algorithms::kNumAlgorithms)
                 ? "an unknown algorithm"
                 : algorithms::algorithmName(static_cast<algorithms::Algorithm>(d.algo - 1));
    };
    return base::format(
        "ranks chose different algorithms for one call: %s by %s; %s by %s (COLLIE_ALGO, or the tuner's inputs, "
        "differ between the ranks: set COLLIE_ALGO alike on every rank)",
        (aFirst ? a : b).c_str(), by(aFirst ? da : db), (aFirst ? b : a).c_str(), by(aFirst ? db : da));
  }
  return base::format(
      "mismatched calls: %s; %s (every rank must make the same collective calls in the same order "
      "with the same type, op, count and root, and each send must match a receive of the same type "
      "and count)",
      (aFirst ? a : b).c_str(), (aFirst ? b : a).c_str());
}

}  // namespace collie::core
