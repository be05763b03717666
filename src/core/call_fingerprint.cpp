// Call fingerprints: encoding and description (see call_fingerprint.hpp).
#include "core/call_fingerprint.hpp"

#include <algorithm>

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

bool reduces(Collective c) {
  return c == Collective::AllReduce || c == Collective::Reduce || c == Collective::ReduceScatter;
}
bool rooted(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

struct Decoded {
  bool known = false;  // the collective code is one of ours
  Collective coll = Collective::AllReduce;
  unsigned type = 0;
  unsigned op = 0;  // op + 1, 0: none
  uint64_t count = 0;
  uint32_t tag = 0;
};

Decoded decode(const Fingerprint& fp) {
  Decoded d;
  const unsigned coll = static_cast<unsigned>(fp.shape >> kCollShift) & 15u;
  d.known = coll >= 1 && coll <= kLastColl + 1;
  d.coll = static_cast<Collective>(d.known ? coll - 1 : 0);
  d.type = static_cast<unsigned>(fp.shape >> kTypeShift) & 15u;
  d.op = static_cast<unsigned>(fp.shape >> kOpShift) & 15u;
  d.count = fp.shape & kCountMask;
  d.tag = static_cast<uint32_t>(fp.shape >> kTagShift) & kMaxCommTag;
  return d;
}

}  // namespace

Fingerprint fingerprintOf(const OpDesc& op, uint32_t call, int rank, uint32_t tag) {
  const bool p2p = op.coll == Collective::Send || op.coll == Collective::Recv;
  const Collective coll = p2p ? Collective::Send : op.coll;  // a pair is described as the sender sees it
  Fingerprint fp;
  fp.call = call;
  if (p2p) {
    fp.root = static_cast<uint32_t>((op.coll == Collective::Send ? op.root : rank) + 1);
  } else if (rooted(op.coll)) {
    fp.root = static_cast<uint32_t>(op.root + 1);
  }
  const uint64_t count = std::min<uint64_t>(op.count, kCountMask);
  const uint64_t opCode = reduces(coll) ? static_cast<uint64_t>(op.op) + 1 : 0;
  fp.shape = count | static_cast<uint64_t>(tag & kMaxCommTag) << kTagShift |
             (static_cast<uint64_t>(coll) + 1) << kCollShift | (static_cast<uint64_t>(op.type) & 15u) << kTypeShift |
             (opCode & 15u) << kOpShift;
  return fp;
}

bool isSendTo(const Fingerprint& fp, int rank) {
  const Decoded d = decode(fp);
  return d.known && d.coll == Collective::Send && static_cast<int64_t>(fp.root) == static_cast<int64_t>(rank) + 1;
}

bool isCollectiveFingerprint(const Fingerprint& fp) {
  const Decoded d = decode(fp);
  return d.known && d.coll != Collective::Send && d.coll != Collective::Recv;
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
    const long long receiver = static_cast<long long>(fp.root) - 1;  // any 32 bits from a peer: no int overflow
    if (receiver == rank) {
      return base::format("Recv(%s, %llu from rank %d) as receive #%u from rank %d%s", type, count, other, fp.call,
                          other, comm.c_str());
    }
    return base::format("Send(%s, %llu to rank %lld) as send #%u to rank %lld%s", type, count, receiver, fp.call,
                        receiver, comm.c_str());
  }
  std::string args = type;
  if (d.op != 0) args += std::string(", ") + base::reduceOpName(static_cast<ReduceOp>(d.op - 1));
  args += base::format(", %llu", count);
  if (fp.root != 0) args += base::format(", root %lld", static_cast<long long>(fp.root) - 1);
  return base::format("%s(%s) as call #%u%s", algorithms::collectiveName(d.coll), args.c_str(), fp.call, comm.c_str());
}

std::string describeCall(const Fingerprint& fp, int rank, int other) {
  return base::format("rank %d called %s", rank, callText(fp, rank, other).c_str());
}

std::string describeMismatch(const transport::MismatchRecord& r) {
  const bool aFirst = r.rankA <= r.rankB;
  const std::string a = describeCall(r.a, r.rankA, r.rankB), b = describeCall(r.b, r.rankB, r.rankA);
  return base::format(
      "mismatched calls: %s; %s (every rank must make the same collective calls in the same order "
      "with the same type, op, count and root, and each send must match a receive of the same type "
      "and count)",
      (aFirst ? a : b).c_str(), (aFirst ? b : a).c_str());
}

}  // namespace collie::core
