// Closing the links init's table all-gather made and later calls may not need (bootstrap_plan.hpp, step 4), so that
// under lazy connection a rank holds O(1) links after init instead of log2 N: the links to gatherOnlyPeers, closed by
// both ends once init's own calls (the all-gather, calibration) are over.
//
// Who: the gatherOnlyPeers whose transport dials at any time (Transport::dialsAnyTime: tcp, shm, ucx). A pair over a
// transport that connects only collectively (none of collie's own) stays open: reopening it would need both ends in
// one connect, which a Send/Recv pair split across calls never gives (it would wait until the timeout). gatherOnlyPeers
// is symmetric and both ends choose a pair's transport from the same table, so both ends decide alike; nothing else is
// closed. How, on each rank, for those peers at once (after calibration, before the user's first call):
//   1. release the pair in its transport (Transport::releasePeer: the dial rule takes a dial of the pair afresh
//      from now on, although the link is still open here);
//   2. send each peer a one-byte goodbye and receive its goodbye (one group of Send/Recv, through the executor like
//      any call, with the same timeout and failure handling);
//   3. close the links.
// Why neither end closes while the other may still send or read on the link, and nothing hangs:
//   - Everything a peer sent on the link before its goodbye was taken by receives of this rank's earlier calls (the
//     calls of both ends match, and a link is FIFO), and it sends nothing after its goodbye: so once this rank has
//     read the goodbye, nothing unread is left on the link when it closes (over tcp no reset, which could drop the
//     peer's unread data), and this rank's own goodbye was fully handed over before the peer could read it.
//   - Each end closes after reading the other's goodbye, not after the other read its own: so a peer may close while
//     this rank's receive of that peer's goodbye is still pending (the goodbye sits in the socket or the ring, not
//     read yet). That receive still completes, because a connection delivers everything the peer sent before its
//     close and only then reports the close (tcp: the data comes before the FIN; shm: checkPeer drains the ring,
//     pumpRecv, before failGone). This drain-before-fail is a contract of every Connection, tested by the
//     conformance case PeerCloseGivesRemoteErrorAfterItsLastData. A peer that dies before its goodbye still fails
//     init on this rank.
//   - A peer dials the pair again (a later call needs it) only after its step 3, i.e. after it read this rank's
//     goodbye, which this rank sent after its step 1: the dial is answered, even if this rank still waits for other
//     goodbyes or has not closed its end yet, and its next connect takes that answered connection.
//   - A rank waits only for its peers to reach this point, which every rank does after calibration.
// Eager connection keeps every link (it connected every pair at init on purpose), as do the ring neighbours (ring
// schedules use them: 2 links at most). Alternative not taken: the
// all-gather over short-lived bootstrap sockets would need a second handshake (secret, strangers, timeouts) beside
// the transports' and could not hand its links to the calls that use the same peers; this reuses the dial rule.
#include <vector>

#include "base/log.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/communicator.hpp"
#include "core/setup.hpp"
#include "transport/handshake.hpp"

namespace collie::core {

using algorithms::Collective;

void CommImpl::closeGatherOnlyLinks() {
  if (connectEagerly(connectMode_, links_.transports)) return;
  std::vector<int> peers;
  for (int p : gatherOnlyPeers(rank_, nranks_)) {
    const int t = links_.transportOf[static_cast<size_t>(p)];
    if (t >= 0 && links_.transports[static_cast<size_t>(t)]->dialsAnyTime()) peers.push_back(p);
  }
  if (peers.empty()) return;
  std::vector<uint8_t> goodbyes(peers.size(), 1), received(peers.size(), 0);
  std::vector<OpDesc> ops;
  for (size_t i = 0; i < peers.size(); ++i) {
    releasePeer(links_, peers[i]);
    ops.push_back(makeOp(Collective::Send, &goodbyes[i], nullptr, 1, DataType::Uint8, ReduceOp::Sum, peers[i]));
    ops.push_back(makeOp(Collective::Recv, nullptr, &received[i], 1, DataType::Uint8, ReduceOp::Sum, peers[i]));
  }
  execute(ops, execConfig_);
  for (size_t i = 0; i < peers.size(); ++i) {
    COLLIE_ENFORCE(received[i] == 1, ErrorCode::RemoteError, "%s rank %d: rank %d's goodbye after init read %u",
                   name_.c_str(), rank_, peers[i], static_cast<unsigned>(received[i]));
    executor_->setConnection(peers[i], nullptr);
    closePeer(links_, peers[i]);
  }
  connectedSchedule_ = nullptr;  // ensureConnected must look at the next schedule's peers again
  COLLIE_INFO(
      base::kLogInit, "%s rank %d: closed %zu link(s) of init's all-gather (%s); now connected to %d of %d peers",
      name_.c_str(), rank_, peers.size(), transport::handshake::rankList(peers).c_str(), connectedPeers(), nranks_ - 1);
}

}  // namespace collie::core
