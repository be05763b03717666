// Flight recorder dumps on signals: SIGUSR1 writes every live recorder's file and the process goes on; SIGTERM and
// SIGABRT write them, then the process ends by the same signal as it would have without collie.
//
// A signal handler may only call async-signal-safe functions, and formatting JSON or opening files is not one of
// them. So the handler only write()s the signal number into a pipe and, for a fatal signal, poll()s a second pipe
// for up to 3 s; a thread of its own (started with every signal blocked, so it never runs the handler itself)
// reads the pipe, dumps every registered recorder under the registry's lock and answers on the second pipe. The
// handler then restores the default action and raises the signal again.
//
// Handlers are installed only when COLLIE_FLIGHT_RECORDER or COLLIE_TRACE is set (a dump also writes out the
// trace's buffered events, call_trace.hpp), on the first recorder, and only for signals
// whose action is still the default: a program's own SIGTERM handler is left alone. After fork() the child has
// no dump thread: its registry starts empty and the next recorder starts a new thread.
//
// The dump thread writes each recorder's own file before flushing its trace, and flushes a trace only if its lock
// is free: the thread the signal interrupted may hold it, and would never let go. An atexit hook flushes every
// registered trace too (its lock taken the same way), for a process that exits without destroying them.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "base/params.hpp"
#include "core/flight_recorder.hpp"

namespace collie::core {
namespace {

std::mutex gMu;
// Made on first use and never destroyed: a communicator with static storage registers its recorder before this
// file's statics may be made, and unregisters it at exit after they are gone.
std::vector<FlightRecorder*>& recorders() {
  static auto* live = new std::vector<FlightRecorder*>;
  return *live;
}
bool gStarted = false;
volatile int gSignalFd = -1;  // write end: the handler sends the signal number
volatile int gDoneFd = -1;    // read end: the dump thread answers a fatal signal
int gDoneWriteFd = -1;
constexpr int kSignals[] = {SIGUSR1, SIGTERM, SIGABRT};

void onSignal(int sig) {
  const int savedErrno = errno;
  const auto c = static_cast<char>(sig);
  const int sfd = gSignalFd;
  const bool sent = sfd >= 0 && ::write(sfd, &c, 1) == 1;
  if (sig != SIGUSR1) {
    const int dfd = gDoneFd;
    if (sent && dfd >= 0) {
      pollfd p{dfd, POLLIN, 0};
      // At most 2 s for the dump, inside collierun's 3 s from SIGTERM to SIGKILL, so that a slow dump ends with
      // this process's own signal (and exit status) rather than racing the launcher's kill.
      if (::poll(&p, 1, 2000) == 1) {
        char ack;
        (void)!::read(dfd, &ack, 1);
      }
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // blocked while this handler runs: delivered, with the default action, when it returns
  }
  errno = savedErrno;
}

void dumpThread(int readFd) {
  for (;;) {
    char c = 0;
    ssize_t n = ::read(readFd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    const int sig = c;
    {
      std::lock_guard<std::mutex> lock(gMu);
      const std::string reason = std::string("signal ") + sigabbrev_np(sig);
      for (FlightRecorder* r : recorders()) r->dump(reason, /*fromSignal=*/true);
    }
    if (sig != SIGUSR1) {
      const char ack = 1;
      (void)!::write(gDoneWriteFd, &ack, 1);
    }
  }
}

// Under gMu.
void startLocked() {
  int sigPipe[2], donePipe[2];
  if (::pipe2(sigPipe, O_CLOEXEC) != 0) return;
  if (::pipe2(donePipe, O_CLOEXEC) != 0) {
    ::close(sigPipe[0]);
    ::close(sigPipe[1]);
    return;
  }
  ::fcntl(sigPipe[1], F_SETFL, O_NONBLOCK);  // a handler must never block on a full pipe
  gSignalFd = sigPipe[1];
  gDoneFd = donePipe[0];
  gDoneWriteFd = donePipe[1];
  // The thread inherits this mask: every signal blocked, so the kernel never runs the handler on it.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  std::thread(dumpThread, sigPipe[0]).detach();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  for (int sig : kSignals) {
    struct sigaction now {};
    if (::sigaction(sig, nullptr, &now) != 0) continue;
    if (now.sa_handler != SIG_DFL && now.sa_handler != onSignal) {
      COLLIE_INFO(base::kLogColl, "flight recorder: %s has a handler already; no dump on it", sigabbrev_np(sig));
      continue;
    }
    struct sigaction act {};
    act.sa_handler = onSignal;
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_RESTART;
    ::sigaction(sig, &act, nullptr);
  }
  gStarted = true;
}

// A process that ends without destroying its communicators (exit() or a return from main) still writes what
// their traces buffered (up to 4095 events each).
void flushAtExit() {
  std::lock_guard<std::mutex> lock(gMu);
  for (FlightRecorder* r : recorders()) r->flushTraceAtExit();
}

void atforkPrepare() { gMu.lock(); }
void atforkParent() { gMu.unlock(); }
void atforkChild() {
  // The dump thread did not follow; the parent's recorders are not this process's to dump.
  recorders().clear();
  gStarted = false;
  gSignalFd = -1;
  gDoneFd = -1;
  gDoneWriteFd = -1;
  gMu.unlock();
}

}  // namespace

void registerFlightRecorder(FlightRecorder* r) {
  static const bool hooks =
      pthread_atfork(atforkPrepare, atforkParent, atforkChild) == 0 && std::atexit(flushAtExit) == 0;
  (void)hooks;
  std::lock_guard<std::mutex> lock(gMu);
  int instance = 0;  // the lowest not held by a live recorder of the same name and rank
  for (bool taken = true; taken; instance += taken ? 1 : 0) {
    taken = false;
    for (const FlightRecorder* q : recorders())
      taken = taken || (q->instance() == instance && q->rank() == r->rank() && q->name() == r->name());
  }
  r->instance_ = instance;  // under the lock: a recorder registering at once from another thread sees it
  recorders().push_back(r);
  if (!gStarted && (!base::params::flightRecorder().empty() || !base::params::trace().empty())) startLocked();
}

void unregisterFlightRecorder(FlightRecorder* r) {
  std::lock_guard<std::mutex> lock(gMu);
  std::vector<FlightRecorder*>& live = recorders();
  if (auto it = std::find(live.begin(), live.end(), r); it != live.end()) live.erase(it);
}

}  // namespace collie::core
