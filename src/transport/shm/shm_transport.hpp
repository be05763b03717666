// The shared-memory transport: links ranks on the same host (same hostHash and network namespace) through
// rings in shared memory, with large messages in a single copy where the kernel allows it. See
// shm_transport.cpp for the handshake, shm_connection.cpp for the data path and waking, shm_segment.hpp for
// the shared layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/accept_loop.hpp"
#include "transport/dialer.hpp"
#include "transport/handshake.hpp"
#include "transport/shm/shm_hello.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace collie::transport::shm {

class ShmWaker;

/// Settings of a ShmTransport; the defaults come from the params registry. Ring sizes are the receiver's
/// choice (the sender learns them at connect time), so they may differ between ranks.
struct ShmOptions {
  int slots = 0;               ///< 0: COLLIE_SHM_SLOTS (rounded up to a power of two)
  int64_t slotBytes = 0;       ///< 0: COLLIE_SHM_SLOT_BYTES (rounded up to 64)
  int singleCopy = -1;         ///< 0 off, 1 auto, 2 wherever allowed; < 0: COLLIE_SHM_SINGLE_COPY
  int64_t singleCopyMin = -1;  ///< < 0: COLLIE_SHM_SINGLE_COPY_MIN_BYTES
  std::string backing;         ///< empty: COLLIE_SHM_BACKING
  /// Tests: read a peer that is a thread of this process with process_vm_readv too (not memcpy).
  bool crossMemoryForThreads = false;
};

/// Shared-memory transport for ranks on one host. Its pairs connect by the dial rule (transport/dialer.hpp): each
/// side's hello carries, over SCM_RIGHTS, the fd of the ring it receives on, of its control line and of its poller's
/// eventfd; then each says whether it can read the other's memory.
class ShmTransport : public DialingTransport, private handshake::DialProtocol {
 public:
  explicit ShmTransport(const ShmOptions& options = {});
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  const char* name() const override { return "shm"; }
  TransportKind kind() const override { return TransportKind::Shm; }
  /// Listens on an abstract unix socket (nothing in the filesystem); publishes its name as self's address of
  /// kind Shm and this process's network namespace in self.netNs.
  void listen(PeerInfo& self) override;
  /// Both ranks listen on shm, run on the same host (hostHash) and share a network namespace.
  bool canConnect(const PeerInfo& local, const PeerInfo& peer) const override;
  /// A ShmTransport with these options on this listener (same address), answering only its own communicator, with
  /// a control line and waker of its own (made at its first connection, for that communicator's poller).
  std::unique_ptr<Transport> shareListener() const override;

  /// The name (in the abstract unix namespace) of the socket `info`'s shm transport listens on; "" if none.
  static std::string addressOf(const PeerInfo& info);

  uint32_t slots() const { return slots_; }
  uint32_t slotBytes() const { return slotBytes_; }

 private:
  struct PairSetup;  ///< one side of one pair's handshake (shm_transport.cpp)

  handshake::Dialer& dialer() const override { return *dialer_; }
  // The dial rule's messages (handshake::DialProtocol, dialer.hpp).
  UniqueFd dialSocket(handshake::Handshake& hs, int peer, int channel) override;
  void sendHello(handshake::Handshake& hs, handshake::Link& link) override;
  void onAnswer(handshake::Handshake& hs, handshake::Link& link) override;
  void answer(handshake::Handshake& hs, handshake::Link& link) override;
  std::unique_ptr<Connection> finish(handshake::Handshake& hs, int peer, std::vector<handshake::Link>& links,
                                     bool dialled) override;
  void forget(int peer) override;
  /// This rank's control line and waker, made on first need (either thread; under mu_).
  void makeControl(const CommContext& ctx);
  void makeRing(const CommContext& ctx, int peer, PairSetup& ps);
  void sendOurHello(handshake::Handshake& hs, int peer, PairSetup& ps, int fd);
  /// Maps what the peer's hello brought, probes its memory and answers with our Ack.
  void absorbHello(handshake::Handshake& hs, int peer, PairSetup& ps, int fd, const Msg& m, std::vector<UniqueFd>& fds);
  std::unique_ptr<Connection> makeConnection(int me, int peer, PairSetup& ps, UniqueFd socket);

  ShmOptions options_;
  uint32_t slots_;
  uint32_t slotBytes_;
  int singleCopy_;  ///< 0 off, 1 auto (threads; processes where process_vm_readv pays), 2 wherever allowed
  size_t singleCopyMin_;
  Backing backing_;
  std::mutex mu_;       ///< guards what both threads make: the control line, answering_
  UniqueFd controlFd_;  ///< this rank's RankControl (its segment is in the waker)
  std::shared_ptr<ShmWaker> waker_;
  std::map<int, std::unique_ptr<PairSetup>> dialing_;    ///< by peer: this rank's dials (the dialler's thread)
  std::map<int, std::unique_ptr<PairSetup>> answering_;  ///< by peer: dials answered, not taken yet
  std::unique_ptr<handshake::Wire> wire_;
  std::unique_ptr<handshake::Dialer> dialer_;  ///< after what it uses: destroyed first
};

}  // namespace collie::transport::shm

namespace collie::transport {
using shm::ShmOptions;
using shm::ShmTransport;
}  // namespace collie::transport
