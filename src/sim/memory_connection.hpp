// In-memory connections between ranks of one process, for the simulator (src/algorithms/simulator.*) and
// tests. A MemoryFabric links n ranks; connect(rank, peer) gives rank's Connection to peer. Transfers on the
// link a -> b are matched in order, the k-th send of a with the k-th receive that b posted for a; sizes must
// match (a mismatch throws InternalError naming both ranks and the transfer's index).
//
// Time model. The fabric has a clock; nothing is delivered before its time comes:
//   - a send posted at time t leaves when a's outbound port is free (depart = max(t, out[a])) and holds it for
//     overhead + bytes * beta; alpha later it reaches b's inbound port, waits there until that port is free
//     (enter = max(depart + alpha, in[b])), holds it as long, and has arrived when it leaves it. Ports carry one
//     message at a time; alpha is latency, so consecutive messages pipeline;
//   - it is delivered (copied into the receive, both transfers complete) at max(arrival, time the receive was
//     posted);
//   - with hosts (setHosts), a message between hosts costs interHost's alpha and beta and also waits for and holds
//     the network port of its sender's host (outbound) and of its receiver's host (inbound);
//   - a receive marked as reduced (setReduceMarks) completes gamma * bytes later, the reductions of a rank one
//     after another.
// With all costs zero everything is delivered at once, in progress(). Otherwise a driver moves the clock
// (advanceClock) when no rank can move, then deliverDue() hands out what is due; takeWoken() says which ranks
// saw a transfer complete.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace collie::sim {

using transport::Connection;
using transport::Transfer;

struct MemoryCost {
  double alpha = 0;     ///< seconds from leaving to arriving, per message
  double beta = 0;      ///< seconds per byte on a port
  double gamma = 0;     ///< seconds per byte to reduce a received message
  double overhead = 0;  ///< seconds a message occupies the ports besides its bytes
};

class MemoryFabric {
 public:
  /// copyData = false: transfers complete without moving bytes (timing-only runs on shared buffers).
  explicit MemoryFabric(int nranks, MemoryCost cost = {}, bool copyData = true);
  ~MemoryFabric();
  MemoryFabric(const MemoryFabric&) = delete;
  MemoryFabric& operator=(const MemoryFabric&) = delete;

  /// Places the ranks on hosts (hostOf by rank, hosts 0..H-1; empty: one host): a message between two hosts costs
  /// `interHost` instead and also holds the sending host's outbound and the receiving host's inbound network
  /// port, which all ranks of a host share. Call before any connection is made.
  void setHosts(std::vector<int> hostOf, MemoryCost interHost);

  /// rank's connection to peer (rank != peer). The fabric must outlive it.
  std::unique_ptr<transport::Connection> connect(int rank, int peer);

  /// The receives that `rank` will post for `peer`, in order: nonzero for one that is reduced after it lands.
  void setReduceMarks(int rank, int peer, std::vector<uint8_t> marks);

  double now() const;
  /// Moves the clock to the next pending event; false when nothing is pending.
  bool advanceClock();
  /// Delivers everything due at the current time; true if anything was.
  bool deliverDue();
  /// Appends the ranks that saw a transfer complete since the last call (each once).
  void takeWoken(std::vector<int>& ranks);

  /// True when every posted transfer was matched and has completed.
  bool quiet() const;
  /// What rank waits for (unmatched or undelivered transfers, by peer); empty when nothing.
  std::string pendingOf(int rank) const;
  uint64_t bytesSent(int rank) const;
  uint64_t messagesSent(int rank) const;

  struct State;  ///< internal

 private:
  std::shared_ptr<State> state_;
};

/// Two connected in-memory connections with zero costs: first is a's connection to b, second b's to a.
std::pair<std::unique_ptr<transport::Connection>, std::unique_ptr<transport::Connection>> makeMemoryConnectionPair(
    int a, int b);

}  // namespace collie::sim
