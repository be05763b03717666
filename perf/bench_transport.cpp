// bench_transport: Google Benchmark of the transports themselves, between two processes of this host: this one
// and a forked echo peer, linked by each transport in turn and driven directly (post, then progress() until
// done; no executor, no schedule), so the numbers are what a transport adds.
//
//   PingPong/<transport>/<bytes>   a message there and back; one_way_us = half the round trip
//   Stream/<transport>/<bytes>     64 messages posted with 4 in flight, then a 1-byte ack: bytes_per_second
//   Exchange/<transport>/<bytes>   both processes send 64 messages to each other at once, 4 in flight each way:
//                                  bytes_per_second counts one direction. This is the ceiling of a 2-rank ring
//                                  step (each rank sends and receives a half), hence of 2-rank AllReduce busbw:
//                                  on 2 cores the two directions share the CPUs a one-way Stream has to itself.
//
// Transports: tcp (127.0.0.1, default sockets and striping), shm (default: slots, single copy from
// COLLIE_SHM_SINGLE_COPY_MIN_BYTES), shm_slots (single copy off: every byte through the ring), and ucx where collie
// is built with UCX (UCX's own choice of its transports: UCX_TLS=tcp or UCX_TLS=sm picks one). Both processes
// poll while they wait (yielding the CPU after a pass that moved nothing, like the executor's spin phase), so
// on a 2-core machine each has a core; run it on an idle machine.
#include <benchmark/benchmark.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/poller.hpp"
#include "base/socket.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#if COLLIE_BENCH_UCX
#include "transport/ucx/ucx_transport.hpp"
#endif

namespace {

using collie::transport::Connection;
using collie::transport::Transfer;

#ifndef COLLIE_BENCH_UCX
#define COLLIE_BENCH_UCX 0
#endif
enum Kind { kTcp = 0, kShm = 1, kShmSlots = 2, kUcx = 3 };
constexpr int kKinds = COLLIE_BENCH_UCX ? 4 : 3;  ///< ucx, the last, only where collie is built with UCX
const char* kKindNames[] = {"tcp", "shm", "shm_slots", "ucx"};

enum Op : uint32_t { kPingPong = 1, kStream = 2, kExchange = 3, kQuit = 4 };
struct Cmd {
  uint32_t op;
  uint32_t window;
  uint64_t bytes;
  uint64_t count;   ///< messages per burst (stream) or round trips (ping-pong)
  uint64_t bursts;  ///< stream
};
constexpr uint64_t kStreamBurst = 64;
constexpr uint32_t kStreamWindow = 4;

struct Side {
  collie::base::Poller poller;
  std::unique_ptr<collie::transport::Transport> transports[kKinds];
  std::unique_ptr<Connection> conns[kKinds];
};
Side* gSide = nullptr;
pid_t gChild = -1;

std::unique_ptr<collie::transport::Transport> makeTransport(Kind k) {
  if (k == kTcp) {
    collie::transport::TcpOptions o;
    o.bindAddr = collie::base::parseAddress("127.0.0.1:0");
    return std::make_unique<collie::transport::TcpTransport>(o);
  }
#if COLLIE_BENCH_UCX
  if (k == kUcx) {
    collie::transport::ucx::UcxOptions o;
    o.bindAddr = collie::base::parseAddress("127.0.0.1:0");
    return std::make_unique<collie::transport::ucx::UcxTransport>(o);
  }
#endif
  collie::transport::ShmOptions o;
  if (k == kShmSlots) o.singleCopy = 0;
  return std::make_unique<collie::transport::ShmTransport>(o);
}

void writeAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) std::abort();
    c += w;
    n -= static_cast<size_t>(w);
  }
}
void readAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, c, n);
    if (r <= 0) std::abort();
    c += r;
    n -= static_cast<size_t>(r);
  }
}

/// Both processes: listen on every transport, swap PeerInfos over `fd`, connect.
std::unique_ptr<Side> connectSide(int rank, int fd) {
  auto side = std::make_unique<Side>();
  collie::transport::PeerInfo mine[kKinds], theirs[kKinds];
  for (int k = 0; k < kKinds; ++k) {
    side->transports[k] = makeTransport(static_cast<Kind>(k));
    mine[k].rank = rank;
    mine[k].pid = getpid();
    mine[k].hostHash = 1;
    side->transports[k]->listen(mine[k]);
  }
  writeAll(fd, mine, sizeof(mine));
  readAll(fd, theirs, sizeof(theirs));
  for (int k = 0; k < kKinds; ++k) {
    collie::transport::CommContext ctx;
    ctx.rank = rank;
    ctx.nranks = 2;
    ctx.peers = rank == 0 ? std::vector{mine[k], theirs[k]} : std::vector{theirs[k], mine[k]};
    ctx.name = "bench";
    ctx.timeout = std::chrono::seconds(30);
    ctx.poller = &side->poller;
    for (int i = 0; i < 16; ++i) ctx.secret[i] = static_cast<uint8_t>(i * 7);
    side->conns[k] = std::move(side->transports[k]->connect(ctx, {1 - rank})[0]);
  }
  return side;
}

/// Polls one connection until every transfer is complete, yielding the CPU after a pass that moved nothing (as
/// the executor does), so that a peer sharing the core can run.
void drive(Connection& c, std::initializer_list<Transfer*> ts) {
  for (;;) {
    bool done = true;
    for (Transfer* t : ts) done = done && t->complete;
    if (done) return;
    if (!c.progress()) sched_yield();
  }
}

/// One burst of an exchange, the same on both sides: `count` messages each way, `window` in flight each way.
void exchangeBurst(Connection& c, char* in, char* out, size_t bytes, uint64_t window, uint64_t count) {
  std::vector<Transfer> rs(count), ss(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (i >= window) drive(c, {&rs[i - window], &ss[i - window]});
    rs[i] = Transfer{in + (i % window) * bytes, bytes};
    ss[i] = Transfer{out + (i % window) * bytes, bytes};
    c.postRecv(&rs[i]);
    c.postSend(&ss[i]);
  }
  for (uint64_t i = count > window ? count - window : 0; i < count; ++i) drive(c, {&rs[i], &ss[i]});
}

[[noreturn]] void serve(Side& side) {
  std::vector<char> buf;
  Cmd cmds[kKinds];
  Transfer cmdT[kKinds];
  for (int k = 0; k < kKinds; ++k) {
    cmdT[k] = Transfer{&cmds[k], sizeof(Cmd)};
    side.conns[k]->postRecv(&cmdT[k]);
  }
  for (;;) {
    int k = -1;
    while (k < 0) {
      for (int i = 0; i < kKinds && k < 0; ++i) {
        if (!side.conns[i]->progress()) sched_yield();
        if (cmdT[i].complete) k = i;
      }
    }
    Connection& c = *side.conns[k];
    Cmd cmd = cmds[k];
    if (cmd.op == kQuit) _exit(0);
    if (buf.size() < cmd.bytes * std::max<uint64_t>(cmd.window, 1))
      buf.assign(cmd.bytes * std::max<uint64_t>(cmd.window, 1), 1);
    if (cmd.op == kPingPong) {
      for (uint64_t i = 0; i < cmd.count; ++i) {
        Transfer r{buf.data(), cmd.bytes};
        c.postRecv(&r);
        drive(c, {&r});
        Transfer s{buf.data(), cmd.bytes};
        c.postSend(&s);
        drive(c, {&s});
      }
    } else if (cmd.op == kStream) {
      std::vector<Transfer> rs(cmd.count);
      uint64_t ack = 0;
      for (uint64_t b = 0; b < cmd.bursts; ++b) {
        for (uint64_t i = 0; i < cmd.count; ++i) {
          if (i >= cmd.window) drive(c, {&rs[i - cmd.window]});
          rs[i] = Transfer{buf.data() + (i % cmd.window) * cmd.bytes, cmd.bytes};
          c.postRecv(&rs[i]);
        }
        for (uint64_t i = cmd.count > cmd.window ? cmd.count - cmd.window : 0; i < cmd.count; ++i) drive(c, {&rs[i]});
        Transfer a{&ack, sizeof(ack)};
        c.postSend(&a);
        drive(c, {&a});
      }
    } else if (cmd.op == kExchange) {
      std::vector<char> out(cmd.bytes * cmd.window, 4);
      for (uint64_t b = 0; b < cmd.bursts; ++b)
        exchangeBurst(c, buf.data(), out.data(), cmd.bytes, cmd.window, cmd.count);
    }
    cmdT[k] = Transfer{&cmds[k], sizeof(Cmd)};
    c.postRecv(&cmdT[k]);
  }
}

void sendCmd(Connection& c, const Cmd& cmd) {
  Transfer t{const_cast<Cmd*>(&cmd), sizeof(cmd)};
  c.postSend(&t);
  drive(c, {&t});
}

void pingPong(benchmark::State& state, Kind k) {
  Connection& c = *gSide->conns[k];
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> buf(std::max<size_t>(bytes, 1), 2);
  sendCmd(c, Cmd{kPingPong, 1, bytes, static_cast<uint64_t>(state.max_iterations), 0});
  for (auto _ : state) {
    Transfer s{buf.data(), bytes}, r{buf.data(), bytes};
    c.postRecv(&r);
    c.postSend(&s);
    drive(c, {&s, &r});
  }
  state.counters["one_way_us"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2e-6,
                                                    benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes * 2));
}

void stream(benchmark::State& state, Kind k) {
  Connection& c = *gSide->conns[k];
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> buf(bytes * kStreamWindow, 3);
  sendCmd(c, Cmd{kStream, kStreamWindow, bytes, kStreamBurst, static_cast<uint64_t>(state.max_iterations)});
  std::vector<Transfer> ss(kStreamBurst);
  uint64_t ack = 0;
  for (auto _ : state) {
    for (uint64_t i = 0; i < kStreamBurst; ++i) {
      if (i >= kStreamWindow) drive(c, {&ss[i - kStreamWindow]});
      ss[i] = Transfer{buf.data() + (i % kStreamWindow) * bytes, bytes};
      c.postSend(&ss[i]);
    }
    Transfer a{&ack, sizeof(ack)};
    c.postRecv(&a);
    drive(c, {&a});
    for (auto& t : ss) drive(c, {&t});
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kStreamBurst * bytes));
}

void exchange(benchmark::State& state, Kind k) {
  Connection& c = *gSide->conns[k];
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> in(bytes * kStreamWindow, 5), out(bytes * kStreamWindow, 6);
  sendCmd(c, Cmd{kExchange, kStreamWindow, bytes, kStreamBurst, static_cast<uint64_t>(state.max_iterations)});
  for (auto _ : state) exchangeBurst(c, in.data(), out.data(), bytes, kStreamWindow, kStreamBurst);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kStreamBurst * bytes));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
  std::fflush(nullptr);
  gChild = fork();
  if (gChild < 0) return 1;
  if (gChild == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(sv[0]);
    auto side = connectSide(1, sv[1]);
    serve(*side);
  }
  ::close(sv[1]);
  auto side = connectSide(0, sv[0]);
  gSide = side.get();
  for (int k = 0; k < kKinds; ++k) {
    const Kind kind = static_cast<Kind>(k);
    benchmark::RegisterBenchmark((std::string("PingPong/") + kKindNames[k]).c_str(),
                                 [kind](benchmark::State& s) { pingPong(s, kind); })
        ->RangeMultiplier(8)
        ->Range(8, 1 << 20)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("Stream/") + kKindNames[k]).c_str(),
                                 [kind](benchmark::State& s) { stream(s, kind); })
        ->RangeMultiplier(4)
        ->Range(4 << 10, 4 << 20)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("Exchange/") + kKindNames[k]).c_str(),
                                 [kind](benchmark::State& s) { exchange(s, kind); })
        ->RangeMultiplier(4)
        ->Range(4 << 10, 4 << 20)
        ->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (int k = 0; k < kKinds; ++k) sendCmd(*side->conns[k], Cmd{kQuit, 0, 0, 0, 0});
  int status = 0;
  waitpid(gChild, &status, 0);
  side.reset();
  return 0;
}
