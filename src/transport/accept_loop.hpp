// Taking dials at any time: one thread per process (the accept loop, running while any listener exists) serves the
// listening socket of every transport that connects on first use (tcp, shm, ucx), so a rank answers a peer's dial
// whatever the rank is doing (computing, blocked in another communicator, or in a call of this one).
//
//   - A Listener is a listening socket the loop serves. Several communicators may take dials on one listener (a
//     shrunk communicator keeps its parent's addresses): each adds a Desk, which says which hellos are its own
//     (transport kind, rank, number of ranks, channels, secret) and what to do with them (Desk::take, called on the
//     loop's thread). A hello goes to the one desk whose secret it shows, so no communicator takes another's dial.
//   - Strangers are refused as in every handshake (handshake.hpp): a connection that closes, sends garbage or a
//     wrong magic is logged (WARN, NET) and closed at once; at most kMaxUnverified wait at once per listener (a new
//     one closes the oldest); accept() out of descriptors, with a connection pending, closes the oldest waiting
//     connection or pauses. A hello read whole whose descriptors could not be installed goes to its desk with
//     Link::failure set, which turns the dial down and fails the pair naming the shortage.
//   - A well-formed hello that no desk takes (a wrong secret, or a communicator not made here yet: a peer may
//     reach the communicator before it registered its desk) is held until kHelloWait after it was accepted, and
//     offered again to every desk added meanwhile; then it is refused as a wrong secret and closed.
// Desk::take runs with the loop's lock held: it must not wait on anything but its own socket (bounded). Adding a desk
// does not wait for that lock: the loop adopts it at the start of its next round, before it refuses any held hello.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/handshake.hpp"

namespace collie::transport::handshake {

class AcceptLoop;

/// One communicator's end of a Listener: the hellos it takes.
struct Desk {
  TransportKind kind = TransportKind::None;
  int rank = -1;
  int nranks = 0;
  int channels = 1;
  uint8_t secret[16] = {0};
  /// A verified hello for this desk (link.peer and link.channel set from it), on the loop's thread. It moves
  /// from the link to keep it; a link it leaves is closed.
  std::function<void(Link&)> take;
};

/// A listening socket served by the process's accept loop (see the top of this file).
class Listener {
 public:
  /// Serves `fd` (non-blocking, listening), reading hellos with `wire`; `transport` and `rank` are for messages.
  Listener(UniqueFd fd, std::unique_ptr<Wire> wire, const char* transport, int rank);
  /// Stops serving (waits until the loop no longer uses it) and closes the socket.
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// Starts giving `desk` its hellos (held ones too) from the loop's next round, which starts at once and adopts it
  /// before any held hello expires; does not wait for the loop. The desk must stay alive until remove().
  void add(Desk* desk);
  /// After it returns, desk->take is not running and will not run again.
  void remove(Desk* desk);
  /// How long accept() has been failing for want of descriptors (zero when it is not), with its errno in *err.
  std::chrono::steady_clock::duration acceptShortage(int* err) const;

 private:
  friend class AcceptLoop;
  /// Reads what arrived on `link`; 1: consumed (taken, refused or held), 0: not complete yet.
  int read(Link& link);
  /// Offers a complete, well-formed hello to the desks: true when one took it (or refused it as its own).
  bool offer(Link& link);
  void acceptAll();
  /// Refuses (logs and closes) the waiting connections whose time is up.
  void expire(std::chrono::steady_clock::time_point now);
  /// The loop's thread: moves the desks add() left for it into desks_; true if there were any.
  bool adoptDesks();
  /// Offers every held hello to the desks again (some may be new), dropping those taken.
  void offerHeld();
  /// Refuses the oldest waiting connection after a last look for its hello; `why` ends the log line.
  void refuseOldest(const char* why);

  UniqueFd fd_;
  std::unique_ptr<Wire> wire_;
  std::string transport_;
  int rank_;
  std::vector<Desk*> desks_;
  std::mutex pendingMu_;             ///< guards pendingDesks_ (add() does not take the loop's lock)
  std::vector<Desk*> pendingDesks_;  ///< added, not adopted by the loop yet
  std::deque<Link> waiting_;         ///< accepted, hello incomplete or held; oldest first
  bool fdShortage_ = false;
  std::atomic<int64_t> shortageSince_{0};  ///< steady clock ns when accept() began to fail for want of fds; 0: no
  std::atomic<int> shortageErr_{0};
  std::chrono::steady_clock::time_point pauseUntil_{};
  std::shared_ptr<AcceptLoop> loop_;
};

}  // namespace collie::transport::handshake
