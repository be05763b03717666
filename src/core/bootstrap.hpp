// Bootstrap: how ranks that know nothing but a unique id find each other.
//
// The unique id holds the root's address and a random 128-bit secret. The root (a thread in the process
// that created the id, or in rank 0 for launcher-driven init) accepts one connection per rank; each rank
// presents the secret, its rank, nranks and its PeerInfo (where its transports listen). The root serves all
// connections at once (bootstrap_root.cpp): a connection that is silent, sends garbage or lacks the secret is
// refused and logged without delaying anyone, and the root keeps waiting for real ranks. Once all ranks have
// checked in, the root closes its listener, sends every rank the PeerInfo of its (at most three) neighbours in the
// tree the table's all-gather runs along, and exits (bootstrap_plan.hpp). Everything after that (the all-gather of the
// rest of the table, 2 log2 N messages deep, connecting transports, barriers, split) uses the communicator's own
// connections.
#pragma once

#include <collie/collie.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap_wire.hpp"
#include "transport/transport.hpp"

namespace collie::core {

/// The decoded contents of a collieUniqueId.
struct UniqueIdData {
  sockaddr_storage root{};
  std::array<uint8_t, 16> secret{};
};

collieUniqueId encodeUniqueId(const UniqueIdData& data);
/// Throws InvalidArgument when the bytes are not a collie unique id.
UniqueIdData decodeUniqueId(const collieUniqueId& id);
std::string uniqueIdToHex(const collieUniqueId& id);
collieUniqueId uniqueIdFromHex(const std::string& hex);
std::array<uint8_t, 16> randomSecret();

/// The root of one bootstrap. Serving happens on a thread of its own; the object may be destroyed (the
/// thread is detached and keeps what it needs) or waited for.
class BootstrapRoot {
 public:
  /// Listens on `addr` (port 0: any free port) and serves one bootstrap of up to `timeout`.
  static UniqueIdData start(const sockaddr_storage& addr, const std::array<uint8_t, 16>& secret,
                            std::chrono::milliseconds timeout);
};

/// Checks in with the root and returns the PeerInfo table indexed by rank, in which only this rank and its
/// bootstrapPeers are known (bootstrap_plan.hpp); the other entries have rank -1 until the ranks all-gather them.
/// `settings` are this rank's AgreedSettings: the root refuses every rank when they differ between ranks.
/// Once `stop` (when given) turns true, a wait for the root ends at once with InvalidUsage (the communicator's abort).
std::vector<transport::PeerInfo> bootstrapExchange(const UniqueIdData& id, int rank, int nranks,
                                                   const transport::PeerInfo& self, const AgreedSettings& settings,
                                                   std::chrono::milliseconds timeout,
                                                   const std::atomic<bool>* stop = nullptr);

/// A hash identifying this host (host name and boot id), equal for ranks on the same machine.
uint64_t localHostHash();

}  // namespace collie::core
