// Init's all-gather of the PeerInfo table (bootstrap_plan.hpp, step 2), on one rank: the root sent this rank its tree
// neighbours' entries; the rounds of tableGatherPlan bring the rest, each round one group of Send/Recv through the
// executor like any call (same timeout and failure handling). The entries a round brings are checked before anything
// else uses them and given to the links at the end. A round's partners are connected first with the collective
// connect (connectMissing without dialling at any time: of each pair, one end dials and the other waits for that dial;
// both list the pair, in rounds of their own): where both ends dial on first use, one dial is turned away, twice the
// handshakes through each process's accept thread. Under a directory of cards (card_directory.hpp) the messages down
// the tree (from the parent, to the children) carry host records instead of cards, and the rank then tells askers
// the cards of its subtree (Transport::showCards).
#include <algorithm>
#include <vector>

#include "base/errors.hpp"
#include "base/params.hpp"
#include "core/bootstrap_plan.hpp"
#include "core/card_directory.hpp"
#include "core/communicator.hpp"

namespace collie::core {

using algorithms::Collective;

namespace {

/// One message's entries as they travel: whole cards, or host records down the tree under a directory.
struct Entries {
  std::vector<transport::PeerInfo> cards;
  std::vector<HostRecord> records;
  void* data() { return records.empty() ? static_cast<void*>(cards.data()) : static_cast<void*>(records.data()); }
  size_t bytes() const { return cards.size() * sizeof(transport::PeerInfo) + records.size() * sizeof(HostRecord); }
};

}  // namespace

void CommImpl::gatherTable() {
  std::vector<transport::PeerInfo> table = links_.ctx.peers;  // this rank's entry and the root's answer so far
  const auto at = [&](int first, int i) -> transport::PeerInfo& {
    return table[static_cast<size_t>((first + i) % nranks_)];
  };
  const bool directory = links_.cardDirectory;
  const int parent = treePlace(rank_, nranks_).parent;
  for (const TableRound& round : tableGatherPlan(rank_, nranks_, static_cast<int>(base::params::initChunk()))) {
    std::vector<int> partners;
    for (const auto* list : {&round.sends, &round.recvs})
      for (const TableMessage& m : *list) partners.push_back(m.peer);
    std::sort(partners.begin(), partners.end());
    partners.erase(std::unique(partners.begin(), partners.end()), partners.end());
    connectMissing(partners, false);
    std::vector<Entries> outgoing(round.sends.size()), incoming(round.recvs.size());
    std::vector<OpDesc> ops;
    for (size_t k = 0; k < round.sends.size(); ++k) {
      const TableMessage& m = round.sends[k];
      const bool down = directory && m.peer != parent;  // to a child: host records
      Entries& entries = outgoing[k];
      for (int i = 0; i < m.count; ++i) {
        const transport::PeerInfo& e = at(m.first, i);
        COLLIE_INTERNAL_CHECK(e.rank >= 0 && (down || transport::contactKnown(e)),
                              "%s rank %d: init's all-gather sends rank %d's entry unknown", name_.c_str(), rank_,
                              (m.first + i) % nranks_);
        if (down)
          entries.records.push_back(hostRecordOf(e));
        else
          entries.cards.push_back(e);
      }
      ops.push_back(
          makeOp(Collective::Send, entries.data(), nullptr, entries.bytes(), DataType::Uint8, ReduceOp::Sum, m.peer));
    }
    for (size_t k = 0; k < round.recvs.size(); ++k) {
      const TableMessage& m = round.recvs[k];
      Entries& entries = incoming[k];
      if (directory && m.peer == parent)
        entries.records.resize(static_cast<size_t>(m.count));
      else
        entries.cards.resize(static_cast<size_t>(m.count));
      ops.push_back(
          makeOp(Collective::Recv, nullptr, entries.data(), entries.bytes(), DataType::Uint8, ReduceOp::Sum, m.peer));
    }
    execute(ops, execConfig_);
    for (size_t k = 0; k < round.recvs.size(); ++k) {
      const TableMessage& m = round.recvs[k];
      const Entries& entries = incoming[k];
      for (int i = 0; i < m.count; ++i) {
        const int expected = (m.first + i) % nranks_;
        const transport::PeerInfo got = entries.records.empty() ? entries.cards[static_cast<size_t>(i)]
                                                                : peerInfoOf(entries.records[static_cast<size_t>(i)]);
        COLLIE_ENFORCE(got.rank == expected, ErrorCode::RemoteError,
                       "%s rank %d: init's all-gather of the peer table got from rank %d rank %d's entry as rank %d's",
                       name_.c_str(), rank_, m.peer, got.rank, expected);
        transport::PeerInfo& mine = at(m.first, i);
        if (!(mine.rank == expected && transport::contactKnown(mine)))
          mine = got;  // a record never replaces a card (the root's answer)
      }
    }
  }
  completeLinks(links_, std::move(table));
  if (directory) showCardBook();
}

void CommImpl::showCardBook() {
  const auto book = makeCardBook(rank_, nranks_, links_.ctx.peers);
  for (const auto& t : links_.transports) t->showCards(book);
}

}  // namespace collie::core
