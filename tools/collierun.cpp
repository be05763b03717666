// collierun: the local launcher. Starts N copies of a program on this machine as the ranks of one collie job.
//
//   collierun -n N [--timeout SECONDS] [--keep-going] [--] prog args...
//
// What it does, in order:
//  1. Picks the job's bootstrap root: 127.0.0.1 and a port the kernel reports free (bind port 0, read it back,
//     close), and a 128-bit secret from /dev/urandom written as 32 hex characters. A COLLIE_ROOT_ADDR or
//     COLLIE_SECRET already in our environment is passed through instead. Rank 0 hosts the root at that address;
//     that is the library's business, not ours.
//  2. Forks N children into one new process group (led by rank 0, so one kill(-pgid) reaches them and whatever
//     they started), each with COLLIE_RANK, COLLIE_NRANKS, COLLIE_LOCAL_RANK, COLLIE_LOCAL_SIZE, COLLIE_ROOT_ADDR,
//     COLLIE_SECRET and the torchrun names RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE. A close-on-exec pipe
//     per child carries errno back if execvpe fails, so "cannot run 'prog'" is said once and we exit 127 (126
//     when the program exists but cannot be run) instead of N ranks failing with 127.
//  3. One poll loop watches every child's stdout and stderr pipe plus a signalfd (SIGCHLD, SIGINT, SIGTERM,
//     SIGHUP). Output goes out a whole line at a time, prefixed "[rank] ", to our own stdout or stderr; a partial
//     last line is completed with a newline at EOF. When the children are gone the pipes get a short grace
//     period to reach EOF (a grandchild may still hold one open), then we stop reading.
//  4. SIGINT/SIGTERM/SIGHUP are forwarded to the group; a second such signal sends SIGKILL. The first rank that
//     exits non-zero or dies by a signal decides our exit code (its code, or 128+signal) and is named on stderr;
//     the others then get SIGTERM and, 3 s later, SIGKILL. --timeout does the same and exits 124. A rank that
//     dies by SIGKILL we did not send is named as possibly killed by the OOM killer. With --keep-going (jobs that
//     go on without a lost rank, collieCommShrink) every failing rank is named and the others run on; the exit
//     code is still the first failing rank's.
//  0. Before any of this, a warning (the job still runs) when the ranks far exceed the cores (more than 8 per
//     online CPU) or when a rough memory estimate (kRankBytesEstimate per rank) exceeds MemAvailable.
//
// Stdin: rank 0 inherits ours unless it is a terminal (a background process group that reads the terminal is
// stopped by SIGTTIN); the other ranks read /dev/null. Depends on nothing from libcollie.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 4096;
constexpr auto kKillGrace = std::chrono::seconds(3);          // SIGTERM -> SIGKILL
constexpr auto kDrainGrace = std::chrono::milliseconds(200);  // children gone, pipes not yet at EOF
constexpr size_t kMaxPartialLine = 64 * 1024;                 // a longer unterminated line is flushed as is
constexpr int kUsageError = 2;
constexpr long kRanksPerCoreWarn = 8;                 // more ranks per online CPU than this: warn
constexpr uint64_t kRankBytesEstimate = 64ull << 20;  // a small collie rank's resident memory, roughly

constexpr char kUsage[] =
    "Usage: collierun -n N [--timeout SECONDS] [--keep-going] [--] prog [args...]\n"
    "Runs N copies of prog on this machine as the ranks of one collie job.\n"
    "  -n N                number of ranks (1..4096)\n"
    "  --timeout SECONDS   kill the job and exit 124 if it runs longer\n"
    "  --keep-going        a failing rank does not stop the others (they may go on without it)\n"
    "  -h, --help          print this help\n"
    "Warns when N exceeds 8 ranks per CPU core, or N times COLLIERUN_RANK_MEM_MB (default 64) exceeds the\n"
    "available memory.\n"
    "Each rank gets COLLIE_RANK, COLLIE_NRANKS, COLLIE_LOCAL_RANK, COLLIE_LOCAL_SIZE, COLLIE_ROOT_ADDR,\n"
    "COLLIE_SECRET, RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE. Output lines are prefixed \"[rank] \".\n"
    "Exit code: 0 if all ranks succeed, else that of the first failing rank (128+signal if killed),\n"
    "124 on timeout, 127 if prog cannot be found.\n";

void writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, -1);
        continue;
      }
      return;  // EPIPE and the like: whoever reads us is gone; keep managing the job anyway
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void say(const std::string& msg) {
  std::string line = "collierun: " + msg + "\n";
  writeAll(STDERR_FILENO, line.data(), line.size());
}

[[noreturn]] void usageError(const std::string& msg) {
  say(msg + " (try 'collierun --help')");
  std::exit(kUsageError);
}

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

/** The first number in a file (cgroup v2's memory.max holds "max" when unlimited: 0 then), or 0. */
uint64_t readNumber(const char* path) {
  unsigned long long v = 0;
  if (FILE* f = std::fopen(path, "r")) {
    if (std::fscanf(f, "%llu", &v) != 1) v = 0;
    std::fclose(f);
  }
  return static_cast<uint64_t>(v);
}

/** MemAvailable from /proc/meminfo in bytes, lowered to what a cgroup v2 limit leaves; 0 when unknown. */
uint64_t memAvailableBytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  }
  std::fclose(f);
  uint64_t avail = static_cast<uint64_t>(kb) * 1024;
  const uint64_t max = readNumber("/sys/fs/cgroup/memory.max"), cur = readNumber("/sys/fs/cgroup/memory.current");
  if (max > 0 && avail > 0) avail = std::min(avail, max > cur ? max - cur : 0);
  return avail;
}

/** Warns (the job still runs) when nranks is far more than this machine is likely to carry. */
void warnIfOversubscribed(int nranks) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && nranks > kRanksPerCoreWarn * cores) {
    say("warning: " + std::to_string(nranks) + " ranks on " + std::to_string(cores) + " CPU core" +
        (cores == 1 ? "" : "s") + " (more than " + std::to_string(kRanksPerCoreWarn) +
        " per core): expect slow collectives and timeouts");
  }
  const uint64_t avail = memAvailableBytes();
  uint64_t perRank = kRankBytesEstimate;  // COLLIERUN_RANK_MEM_MB: the program's own figure, when known
  if (const char* mb = std::getenv("COLLIERUN_RANK_MEM_MB"); mb && *mb) {
    const unsigned long long v = std::strtoull(mb, nullptr, 10);
    if (v > 0) perRank = static_cast<uint64_t>(v) << 20;
  }
  const uint64_t need = static_cast<uint64_t>(nranks) * perRank;
  if (avail > 0 && need > avail) {
    say("warning: " + std::to_string(nranks) + " ranks may need about " + std::to_string(need >> 20) + " MiB (about " +
        std::to_string(perRank >> 20) + " MiB each, COLLIERUN_RANK_MEM_MB) but only " + std::to_string(avail >> 20) +
        " MiB is available (MemAvailable): the OOM killer may kill ranks");
  }
}

struct Options {
  int nranks = 0;
  std::optional<double> timeoutSec;
  bool keepGoing = false;   // --keep-going
  std::vector<char*> argv;  // prog and its args, null-terminated
};

Options parseArgs(int argc, char** argv) {
  Options opt;
  int i = 1;
  auto value = [&](const std::string& arg, const std::string& name) -> std::string {
    if (arg.size() > name.size() && arg[name.size()] == '=') return arg.substr(name.size() + 1);
    if (name == "-n" && arg.size() > 2) return arg.substr(2);  // -n4
    if (i + 1 >= argc) usageError("option " + name + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      writeAll(STDOUT_FILENO, kUsage, sizeof(kUsage) - 1);
      std::exit(0);
    } else if (arg == "--") {
      ++i;
      break;
    } else if (arg.rfind("-n", 0) == 0) {
      std::string v = value(arg, "-n");
      char* end = nullptr;
      errno = 0;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || n < 1 || n > kMaxRanks) {
        usageError("-n wants a number of ranks from 1 to " + std::to_string(kMaxRanks) + ", not '" + v + "'");
      }
      opt.nranks = static_cast<int>(n);
    } else if (arg.rfind("--timeout", 0) == 0 && (arg.size() == 9 || arg[9] == '=')) {
      std::string v = value(arg, "--timeout");
      char* end = nullptr;
      double t = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(t) || t <= 0) {
        usageError("--timeout wants a positive number of seconds, not '" + v + "'");
      }
      opt.timeoutSec = t;
    } else if (arg == "--keep-going") {
      opt.keepGoing = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      usageError("unknown option '" + arg + "'");
    } else {
      break;
    }
  }
  if (opt.nranks == 0) usageError("missing -n N (the number of ranks)");
  if (i >= argc) usageError("no program to run");
  for (; i < argc; ++i) opt.argv.push_back(argv[i]);
  opt.argv.push_back(nullptr);
  return opt;
}

// 127.0.0.1:PORT with a port that was free a moment ago. Someone may take it before rank 0 binds it; the
// library reports that as a bind failure.
std::string pickRootAddr() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    say(std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(errno));
    std::exit(1);
  }
  close(fd);
  return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

std::string makeSecret() {
  unsigned char bytes[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, bytes, sizeof(bytes)) != static_cast<ssize_t>(sizeof(bytes))) {
    say(std::string("cannot read /dev/urandom: ") + std::strerror(errno));
    std::exit(1);
  }
  close(fd);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

// One pipe from a child: stdout or stderr. Bytes are cut into lines and written to outFd with the prefix.
struct Stream {
  int fd = -1;  // read end; -1 once at EOF
  int outFd = STDOUT_FILENO;
  std::string prefix;
  std::string partial;  // the bytes after the last newline

  void emit(const char* data, size_t size, bool eof) {
    partial.append(data, size);
    std::string batch;
    size_t start = 0;
    for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      batch += prefix;
      batch.append(partial, start, nl + 1 - start);
    }
    partial.erase(0, start);
    if (!partial.empty() && (eof || partial.size() >= kMaxPartialLine)) {
      batch += prefix + partial + "\n";
      partial.clear();
    }
    writeAll(outFd, batch.data(), batch.size());
  }

  // Reads what is there (at most maxReads chunks, so one busy rank cannot starve the others); closes at EOF.
  void pump(int maxReads) {
    char buf[65536];
    for (int i = 0; fd >= 0 && i < maxReads; ++i) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        emit(buf, static_cast<size_t>(n), false);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        return;
      } else {  // EOF or a read error
        emit(nullptr, 0, true);
        close(fd);
        fd = -1;
      }
    }
  }
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  Stream out, err;
};

class Job {
 public:
  explicit Job(Options opt) : opt_(std::move(opt)), ranks_(opt_.nranks) {}

  int run() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
    sigprocmask(SIG_BLOCK, &mask, &oldMask_);
    sigFd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigFd_ < 0) fail("signalfd");
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &oldPipeAction_);  // a closed stdout must not kill us before the children
    raiseFdLimit();
    devNull_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devNull_ < 0) fail("open /dev/null");
    startAll();
    loop();
    return exitCode();
  }

 private:
  [[noreturn]] void fail(const char* what) {
    say(std::string(what) + ": " + std::strerror(errno));
    if (pgid_ > 0) signalAll(SIGKILL);
    std::exit(1);
  }

  void raiseFdLimit() {
    rlimit lim{};
    rlim_t need = static_cast<rlim_t>(opt_.nranks) * 4 + 32;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < need) {
      lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? need : std::min(need, lim.rlim_max);
      setrlimit(RLIMIT_NOFILE, &lim);
    }
  }

  std::vector<std::string> baseEnv() {
    const char* root = std::getenv("COLLIE_ROOT_ADDR");
    const char* secret = std::getenv("COLLIE_SECRET");
    std::string rootAddr = root && *root ? root : pickRootAddr();
    std::string secretHex = secret && *secret ? secret : makeSecret();
    static const char* const kOurs[] = {
        "COLLIE_RANK=",   "COLLIE_NRANKS=", "COLLIE_LOCAL_RANK=", "COLLIE_LOCAL_SIZE=", "COLLIE_ROOT_ADDR=",
        "COLLIE_SECRET=", "RANK=",          "WORLD_SIZE=",        "LOCAL_RANK=",        "LOCAL_WORLD_SIZE="};
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      bool ours = false;
      for (const char* name : kOurs) ours = ours || std::strncmp(*e, name, std::strlen(name)) == 0;
      if (!ours) env.emplace_back(*e);
    }
    std::string n = std::to_string(opt_.nranks);
    for (const char* name : {"COLLIE_NRANKS=", "COLLIE_LOCAL_SIZE=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE="}) {
      env.push_back(name + n);
    }
    env.push_back("COLLIE_ROOT_ADDR=" + rootAddr);
    env.push_back("COLLIE_SECRET=" + secretHex);
    return env;
  }

  void startAll() {
    std::vector<std::string> env = baseEnv();
    for (int r = 0; r < opt_.nranks; ++r) {
      std::vector<std::string> rankEnv = env;
      for (const char* name : {"COLLIE_RANK=", "COLLIE_LOCAL_RANK=", "RANK=", "LOCAL_RANK="}) {
        rankEnv.push_back(name + std::to_string(r));
      }
      int execErr = start(r, rankEnv);
      if (execErr != 0) {
        say("cannot run '" + std::string(opt_.argv[0]) + "': " + std::strerror(execErr));
        signalAll(SIGKILL);
        for (Rank& rank : ranks_) {
          if (rank.pid > 0) waitpid(rank.pid, nullptr, 0);
        }
        std::exit(execErr == ENOENT ? 127 : 126);
      }
    }
  }

  // Forks rank r; returns 0 once it runs the program, else the errno of the failed exec.
  int start(int r, std::vector<std::string>& env) {
    int outPipe[2], errPipe[2], execPipe[2];
    if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0 || pipe2(execPipe, O_CLOEXEC) != 0) {
      fail("pipe");
    }
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int stdinFd = (r == 0 && !isatty(STDIN_FILENO)) ? -1 : devNull_;

    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {  // child: only async-signal-safe calls from here to exec
      setpgid(0, pgid_);
      sigprocmask(SIG_SETMASK, &oldMask_, nullptr);
      sigaction(SIGPIPE, &oldPipeAction_, nullptr);
      if (stdinFd >= 0) dup2(stdinFd, STDIN_FILENO);
      dup2(outPipe[1], STDOUT_FILENO);
      dup2(errPipe[1], STDERR_FILENO);
      execvpe(opt_.argv[0], opt_.argv.data(), envp.data());
      int err = errno;
      ssize_t ignored = write(execPipe[1], &err, sizeof(err));
      (void)ignored;
      _exit(127);
    }
    if (pgid_ == 0) pgid_ = pid;
    setpgid(pid, pgid_);  // also done by the child; whichever runs first wins, so no signal can miss it
    close(outPipe[1]);
    close(errPipe[1]);
    close(execPipe[1]);
    Rank& rank = ranks_[r];
    rank.pid = pid;
    rank.running = true;
    ++running_;
    // Appended piece by piece: "[" + std::to_string(r) trips GCC 12's -Wrestrict false positive at -O3.
    std::string prefix = "[";
    prefix += std::to_string(r);
    prefix += "] ";
    rank.out = Stream{outPipe[0], STDOUT_FILENO, prefix, {}};
    rank.err = Stream{errPipe[0], STDERR_FILENO, prefix, {}};
    for (int fd : {outPipe[0], errPipe[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

    int err = 0;  // EOF with nothing read: exec succeeded and closed the pipe
    ssize_t n;
    while ((n = read(execPipe[0], &err, sizeof(err))) < 0 && errno == EINTR) {
    }
    close(execPipe[0]);
    return n == static_cast<ssize_t>(sizeof(err)) ? err : 0;
  }

  // The group reaches the ranks and whatever they started; a rank that left the group is signalled itself.
  void signalAll(int sig) {
    if (pgid_ > 0) kill(-pgid_, sig);
    for (const Rank& rank : ranks_) {
      if (rank.running && getpgid(rank.pid) != pgid_) kill(rank.pid, sig);
    }
  }

  void terminateAll() {
    if (terminating_) return;
    terminating_ = true;
    signalAll(SIGTERM);
    killAt_ = Clock::now() + kKillGrace;
  }

  void onSignal(int sig) {
    if (sig == SIGCHLD) {
      reap();
    } else if (interruptSignal_ == 0) {
      interruptSignal_ = sig;
      signalAll(sig);
    } else {
      signalAll(SIGKILL);
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (int r = 0; r < opt_.nranks; ++r) {
        Rank& rank = ranks_[r];
        if (rank.pid != pid || !rank.running) continue;
        rank.running = false;
        --running_;
        rank.out.pump(1 << 20);  // its last words come before our verdict on it
        rank.err.pump(1 << 20);
        bool failed = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
        if (failed && (!failure_ || opt_.keepGoing) && !timedOut_ && !terminating_) {
          if (WIFSIGNALED(status)) {
            // Nobody here sent SIGKILL (terminating_ is false): the usual sender is the kernel's OOM killer.
            const bool oom = WTERMSIG(status) == SIGKILL && !terminating_ && !interruptSignal_;
            say("rank " + std::to_string(r) + " killed by signal " + signalName(WTERMSIG(status)) +
                (oom ? ", possibly by the OOM killer (out of memory; see dmesg, or run fewer ranks)" : ""));
            if (!failure_) failure_ = 128 + WTERMSIG(status);
          } else {
            say("rank " + std::to_string(r) + " exited with code " + std::to_string(WEXITSTATUS(status)));
            if (!failure_) failure_ = WEXITSTATUS(status);
          }
          if (!opt_.keepGoing) terminateAll();
        }
      }
    }
  }

  void loop() {
    std::optional<Clock::time_point> deadline, drainUntil;
    if (opt_.timeoutSec) {
      deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*opt_.timeoutSec));
    }
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    for (;;) {
      auto now = Clock::now();
      if (running_ == 0 && !drainUntil) drainUntil = now + kDrainGrace;
      if (deadline && now >= *deadline && running_ > 0) {
        char secs[32];
        std::snprintf(secs, sizeof(secs), "%g", *opt_.timeoutSec);
        say(std::string("job timed out after ") + secs + " s; killing all ranks");
        timedOut_ = true;
        terminateAll();
      }
      if (killAt_ && now >= *killAt_) {
        signalAll(SIGKILL);
        killAt_.reset();
      }
      if (terminating_ || running_ == 0) deadline.reset();

      fds.assign(1, pollfd{sigFd_, POLLIN, 0});
      streams.assign(1, nullptr);
      for (Rank& rank : ranks_) {
        for (Stream* s : {&rank.out, &rank.err}) {
          if (s->fd < 0) continue;
          fds.push_back(pollfd{s->fd, POLLIN, 0});
          streams.push_back(s);
        }
      }
      if (running_ == 0 && (fds.size() == 1 || now >= *drainUntil)) break;

      std::optional<Clock::time_point> wake;
      for (auto& t : {deadline, killAt_, drainUntil}) {
        if (t && (!wake || *t < *wake)) wake = t;
      }
      int timeoutMs = -1;
      if (wake) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - now).count() + 1;
        timeoutMs = static_cast<int>(std::clamp<int64_t>(ms, 0, 60000));
      }
      if (poll(fds.data(), fds.size(), timeoutMs) < 0) {
        if (errno == EINTR) continue;
        fail("poll");
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents) streams[i]->pump(4);
      }
      if (fds[0].revents) {
        signalfd_siginfo si;
        while (read(sigFd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
          onSignal(static_cast<int>(si.ssi_signo));
        }
      }
    }
    for (Rank& rank : ranks_) {  // a grandchild still holds the pipe: flush what we have and stop
      for (Stream* s : {&rank.out, &rank.err}) {
        if (s->fd < 0) continue;
        s->pump(16);
        if (s->fd >= 0) s->emit(nullptr, 0, true);
      }
    }
  }

  int exitCode() const {
    if (failure_) return failure_;
    if (timedOut_) return 124;
    if (interruptSignal_) return 128 + interruptSignal_;
    return 0;
  }

  Options opt_;
  std::vector<Rank> ranks_;
  pid_t pgid_ = 0;
  int running_ = 0;
  int sigFd_ = -1;
  int devNull_ = -1;
  sigset_t oldMask_{};
  struct sigaction oldPipeAction_ {};
  int failure_ = 0;  // exit code decided by the first failing rank
  bool timedOut_ = false;
  bool terminating_ = false;  // SIGTERM sent to all after a failure or the timeout
  int interruptSignal_ = 0;
  std::optional<Clock::time_point> killAt_;
};

}  // namespace

int main(int argc, char** argv) {
  for (int fd = 0; fd <= 2; ++fd) {  // keep 0-2 taken so no pipe lands there
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
  Options opt = parseArgs(argc, argv);
  warnIfOversubscribed(opt.nranks);
  return Job(std::move(opt)).run();
}
