// Running out of file descriptors, named as what it is. A job needs a few descriptors per peer (tcp:
// COLLIE_SOCKETS_PER_PEER sockets each; shm: a socket and segments), so a large job under a small `ulimit -n`
// runs out during connection set-up. Every errno message collie prints goes through errnoString(), which for
// EMFILE/ENFILE adds fdShortageMessage(): how many are open, the limit, and what to change.
//
// Where a shortage may pass (another thread closing descriptors, a stranger's connection dropped), the accept and
// connect paths back off with FdShortageBackoff and retry for a short grace period before failing with it.
#pragma once

#include <chrono>
#include <string>

namespace collie::base {

/// The descriptors this process has open and its RLIMIT_NOFILE soft limit (-1 where unknown).
struct FdUsage {
  long open = -1;
  long limit = -1;
};
FdUsage fdUsage();

/// EMFILE (this process is at its limit) or ENFILE (the system's table is full).
bool isFdShortage(int err);
/// "out of file descriptors: N open, limit M; raise ulimit -n (or lower COLLIE_SOCKETS_PER_PEER)"; for ENFILE the
/// system-wide form.
std::string fdShortageMessage(int err);

/// This process met a shortage (`err`: EMFILE or ENFILE) now. A connect that then fails because a peer went away or
/// stayed silent names it (transport/dialer.hpp): a dial this process dropped or could not take is often the cause.
void noteFdShortage(int err);
/// When this process last met a shortage (the epoch of steady_clock when it never did), its errno in *err.
std::chrono::steady_clock::time_point lastFdShortage(int* err);

/// Retries through a shortage of descriptors (see the file comment).
class FdShortageBackoff {
 public:
  static constexpr std::chrono::milliseconds kGrace{2000};
  static constexpr std::chrono::milliseconds kPause{10};

  /// After `what` failed with EMFILE/ENFILE `err`: sleeps kPause (never past `deadline`) and returns while the
  /// shortage has lasted less than kGrace; then throws SystemError "<what> failed: <fdShortageMessage>".
  void wait(int err, const char* what, std::chrono::steady_clock::time_point deadline);
  /// A descriptor was obtained: the shortage (if any) is over.
  void reset() { started_ = false; }
  bool active() const { return started_; }

 private:
  bool started_ = false;
  std::chrono::steady_clock::time_point since_{};
};

}  // namespace collie::base
