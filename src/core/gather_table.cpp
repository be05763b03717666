// Init's all-gather of the PeerInfo table (bootstrap_plan.hpp, step 2), on one rank: the root sent this rank its tree
// neighbours' entries; the rounds of tableGatherPlan bring the rest, each round one group of Send/Recv through the
// executor like any call (same timeout and failure handling). The entries a round brings are checked before anything
// else uses them and given to the links at the end. A round's partners are connected first with the collective
// connect (connectMissing without dialling at any time: of each pair, one end dials and the other waits for that dial;
// both list the pair, in rounds of their own): where both ends dial on first use, one dial is turned away, twice the
// handshakes through each process's accept thread.
#include <algorithm>
#include <vector>

#include "base/errors.hpp"
#include "base/params.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/communicator.hpp"

namespace collie::core {

using algorithms::Collective;

void CommImpl::gatherTable() {
  std::vector<transport::PeerInfo> table = links_.ctx.peers;  // this rank's entry and the root's answer so far
  const auto at = [&](int first, int i) -> transport::PeerInfo& {
    return table[static_cast<size_t>((first + i) % nranks_)];
  };
  for (const TableRound& round : tableGatherPlan(rank_, nranks_, static_cast<int>(base::params::initChunk()))) {
    std::vector<int> partners;
    for (const auto* list : {&round.sends, &round.recvs})
      for (const TableMessage& m : *list) partners.push_back(m.peer);
    std::sort(partners.begin(), partners.end());
    partners.erase(std::unique(partners.begin(), partners.end()), partners.end());
    connectMissing(partners, false);
    std::vector<std::vector<transport::PeerInfo>> outgoing, incoming;
    outgoing.reserve(round.sends.size());
    incoming.reserve(round.recvs.size());
    std::vector<OpDesc> ops;
    for (const TableMessage& m : round.sends) {
      std::vector<transport::PeerInfo>& entries = outgoing.emplace_back();
      for (int i = 0; i < m.count; ++i) {
        COLLIE_INTERNAL_CHECK(at(m.first, i).rank >= 0, "%s rank %d: init's all-gather sends rank %d's entry unknown",
                              name_.c_str(), rank_, (m.first + i) % nranks_);
        entries.push_back(at(m.first, i));
      }
      ops.push_back(makeOp(Collective::Send, entries.data(), nullptr, entries.size() * sizeof(transport::PeerInfo),
                           DataType::Uint8, ReduceOp::Sum, m.peer));
    }
    for (const TableMessage& m : round.recvs) {
      std::vector<transport::PeerInfo>& entries = incoming.emplace_back(static_cast<size_t>(m.count));
      ops.push_back(makeOp(Collective::Recv, nullptr, entries.data(), entries.size() * sizeof(transport::PeerInfo),
                           DataType::Uint8, ReduceOp::Sum, m.peer));
    }
    execute(ops, execConfig_);
    for (size_t k = 0; k < round.recvs.size(); ++k) {
      const TableMessage& m = round.recvs[k];
      for (int i = 0; i < m.count; ++i) {
        const int expected = (m.first + i) % nranks_;
        const transport::PeerInfo& got = incoming[k][static_cast<size_t>(i)];
        COLLIE_ENFORCE(got.rank == expected, ErrorCode::RemoteError,
                       "%s rank %d: init's all-gather of the peer table got from rank %d rank %d's entry as rank %d's",
                       name_.c_str(), rank_, m.peer, got.rank, expected);
        at(m.first, i) = got;
      }
    }
  }
  completeLinks(links_, std::move(table));
}

}  // namespace collie::core
