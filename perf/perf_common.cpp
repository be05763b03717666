/*
 * perf_common.cpp: the driver behind every *_perf tool (see perf_common.hpp).
 *
 * Per size of the sweep and per variant (out-of-place, then in-place):
 *   1. check (-c 1): fill the inputs with small integers whose reduction is exact in every type, zero the output,
 *      run the call once, compare each received element with the host's expectation; the mismatches of all
 *      ranks are summed (collieAllReduce) into the #wrong column;
 *   2. time: -w warmup calls, collieBarrier, -n timed calls (with -z 1, a barrier after each call, as nccl-tests
 *      does); the per-rank mean time per call is combined across ranks per -a (rank 0 / avg / min / max);
 *   3. algbw = size / time and busbw = algbw * the collective's bus factor, as nccl-tests computes them. A call
 *      that took under kMinTimedSeconds (1 us: less than any exchange between processes) is too short to time, and
 *      a single rank's in-place call moves nothing: their algbw and busbw read N/A (JSON null), with a note under
 *      the table, and stay out of the average (instead of bandwidths of thousands of GB/s).
 * Rank 0 prints the nccl-tests header, table and summary, and with -J writes the rows as JSON. Each row ends with
 * the algorithm and transport(s) rank 0's communicator ran for the last timed call of that size
 * (collie::lastCallOf), so a forced -A, or the tuner's pick, can be checked per size.
 * Exit code: 0 when every check passed, 1 when any element was wrong, 2 on a usage or collie error.
 * Without a launcher's environment the tool runs ONE rank in this process (as nccl-tests does with -g 1), after a
 * warning on stderr that says how to start N ranks.
 *
 * With -g 1 the buffers are device memory (perf_cuda.hpp: GPU local rank % device count, its own stream) and every
 * call is enqueued on that stream. The check fills page-locked host images exactly as above and copies them in;
 * the output is copied back and checked on the host by the same code. Timing: CUDA events recorded on the stream
 * around the -n calls (after a cudaStreamSynchronize and the barrier; -z 1 synchronizes the stream before each
 * barrier). Everything else, the table included, is the host path's.
 *
 * Input data (op-dependent, always >= 1 so that a zeroed output never passes):
 *   sum: 1..k with k = min(8, 120 / nranks): the sum stays <= 120, exact in int8, half and bfloat16;
 *   prod: 1 with a 2 where (i + rank) % 7 == 0: at most ceil(nranks / 7) factors of 2;
 *   min/max: 1..11; avg: c(i) + d(rank) with the d summing to 0 over ranks, so the mean is the integer c(i)
 *   (floating types are compared with a tolerance for avg only, since a library may pre-scale by 1/nranks);
 *   no op (AllGather, Broadcast, AlltoAll, SendRecv): 1..97, distinct across ranks and neighbouring indices.
 */
#include "perf_common.hpp"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <collie/collie.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "perf_cuda.hpp"
#include "perf_types.hpp"

namespace collie_perf {
namespace {

// ---- Options ----------------------------------------------------------------------------------------------------

struct Options {
  int nThreads = 1;
  int nGpus = 0;               // -g: 0 host buffers, 1 device buffers
  size_t minBytes = 32 << 20;  // nccl-tests' defaults
  size_t maxBytes = 32 << 20;
  size_t stepBytes = 1 << 20;
  size_t stepFactor = 2;  // collie's default: -f 2 unless -i or -f is given
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int average = 1;
  int blocking = 0;
  int root = 0;
  std::vector<TypeInfo> types{kTypes[7]};  // float
  std::vector<OpInfo> ops{kOps[0]};        // sum
  std::string json;
  std::string
      algo;  // -A: ring, tree, rhd, direct, hier or auto (sets COLLIE_ALGO before init); empty: COLLIE_ALGO as set
};

bool ParseSize(const char* s, size_t* out) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  double unit = 1;
  if (*end != '\0') {
    switch (*end) {
      case 'k':
      case 'K':
        unit = 1024.0;
        break;
      case 'm':
      case 'M':
        unit = 1024.0 * 1024;
        break;
      case 'g':
      case 'G':
        unit = 1024.0 * 1024 * 1024;
        break;
      default:
        return false;
    }
    if (end[1] != '\0' && !(end[1] == 'B' || end[1] == 'b')) return false;
  }
  *out = static_cast<size_t>(v * unit);
  return true;
}

bool ParseInt(const char* s, int* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 0);
  if (end == s || *end != '\0') return false;
  *out = static_cast<int>(v);
  return true;
}

void Usage(const char* prog) {
  std::printf(
      "USAGE: %s (run one process per rank: collierun -n 4 %s -b 8 -e 64M -f 2)\n"
      "\t[-t,--nthreads <1>] threads per process (only 1)\n"
      "\t[-g,--ngpus <0/1>] GPUs per rank: 0 (default) host buffers; 1 device buffers on GPU local rank %% device\n"
      "\t\tcount (COLLIE_LOCAL_RANK / LOCAL_RANK), calls on a stream, timed with CUDA events (CUDA builds only)\n"
      "\t[-b,--minbytes <min size in bytes, K/M/G suffix>] (default 32M)\n"
      "\t[-e,--maxbytes <max size in bytes>] (default 32M)\n"
      "\t[-i,--stepbytes <increment size>] step by adding this (when -f is absent or 1)\n"
      "\t[-f,--stepfactor <increment factor>] step by multiplying (default 2)\n"
      "\t[-n,--iters <iteration count>] (default 20)\n"
      "\t[-w,--warmup_iters <warmup iteration count>] per size and variant (default 5)\n"
      "\t[-c,--check <0/1>] check the results (default 1)\n"
      "\t[-o,--op <sum/prod/min/max/avg/premulsum/all>] (default sum)\n"
      "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>] (default float)\n"
      "\t[-r,--root <root>] (default 0)\n"
      "\t[-z,--blocking <0/1>] 1: wait for completion (-g 1: cudaStreamSynchronize) and barrier after each call\n"
      "\t[-a,--average <0/1/2/3>] combine per-rank times: 0=rank 0, 1=avg, 2=min, 3=max (default 1)\n"
      "\t[-J,--json <file>] write the results as JSON (rank 0)\n"
      "\t[-A,--algo <ring/tree/rhd/direct/hier/auto>] force an algorithm (sets COLLIE_ALGO; auto: the tuner picks)\n"
      "\t[-h,--help]\n",
      prog, prog);
}

/** Parses argv into *o; returns -1 to go on, else the exit code. */
int ParseArgs(int argc, char** argv, Options* o) {
  static const option kLong[] = {{"nthreads", required_argument, nullptr, 't'},
                                 {"ngpus", required_argument, nullptr, 'g'},
                                 {"minbytes", required_argument, nullptr, 'b'},
                                 {"maxbytes", required_argument, nullptr, 'e'},
                                 {"stepbytes", required_argument, nullptr, 'i'},
                                 {"stepfactor", required_argument, nullptr, 'f'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"check", required_argument, nullptr, 'c'},
                                 {"op", required_argument, nullptr, 'o'},
                                 {"datatype", required_argument, nullptr, 'd'},
                                 {"root", required_argument, nullptr, 'r'},
                                 {"blocking", required_argument, nullptr, 'z'},
                                 {"average", required_argument, nullptr, 'a'},
                                 {"json", required_argument, nullptr, 'J'},
                                 {"algo", required_argument, nullptr, 'A'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  const char* prog = argv[0];
  bool factorGiven = false, stepGiven = false;
  int factor = 0;
  auto bad = [&](const char* what, const char* value) {
    std::fprintf(stderr, "%s: invalid %s '%s' (see -h)\n", prog, what, value);
    return 2;
  };
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:w:c:o:d:r:z:a:J:A:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 't':
        if (!ParseInt(optarg, &o->nThreads)) return bad("-t", optarg);
        break;
      case 'g':
        if (!ParseInt(optarg, &o->nGpus)) return bad("-g", optarg);
        break;
      case 'b':
        if (!ParseSize(optarg, &o->minBytes)) return bad("minbytes", optarg);
        break;
      case 'e':
        if (!ParseSize(optarg, &o->maxBytes)) return bad("maxbytes", optarg);
        break;
      case 'i':
        if (!ParseSize(optarg, &o->stepBytes)) return bad("stepbytes", optarg);
        stepGiven = true;
        break;
      case 'f':
        if (!ParseInt(optarg, &factor) || factor < 0) return bad("stepfactor", optarg);
        factorGiven = true;
        break;
      case 'n':
        if (!ParseInt(optarg, &o->iters) || o->iters < 1) return bad("iters", optarg);
        break;
      case 'w':
        if (!ParseInt(optarg, &o->warmup) || o->warmup < 0) return bad("warmup_iters", optarg);
        break;
      case 'c':
        if (!ParseInt(optarg, &o->check)) return bad("check", optarg);
        break;
      case 'r':
        if (!ParseInt(optarg, &o->root) || o->root < 0) return bad("root", optarg);
        break;
      case 'z':
        if (!ParseInt(optarg, &o->blocking)) return bad("blocking", optarg);
        break;
      case 'a':
        if (!ParseInt(optarg, &o->average) || o->average < 0 || o->average > 3) return bad("average", optarg);
        break;
      case 'J':
        o->json = optarg;
        break;
      case 'A':
        o->algo = optarg;
        if (o->algo != "ring" && o->algo != "tree" && o->algo != "rhd" && o->algo != "direct" && o->algo != "hier" &&
            o->algo != "auto")
          return bad("algo", optarg);
        break;
      case 'o': {
        o->ops.clear();
        for (const OpInfo& op : kOps)
          if (std::strcmp(optarg, "all") == 0 || std::strcmp(optarg, op.name) == 0) o->ops.push_back(op);
        if (o->ops.empty()) return bad("op", optarg);
        break;
      }
      case 'd': {
        const char* name = optarg;
        for (const Alias& a : kTypeAliases)
          if (std::strcmp(name, a.alias) == 0) name = a.name;
        o->types.clear();
        for (const TypeInfo& t : kTypes)
          if (std::strcmp(name, "all") == 0 || std::strcmp(name, t.name) == 0) o->types.push_back(t);
        if (o->types.empty()) return bad("datatype", optarg);
        break;
      }
      case 'h':
        Usage(prog);
        return 0;
      default:
        Usage(prog);
        return 2;
    }
  }
  if (optind < argc) return bad("argument", argv[optind]);
  // nccl-tests: a factor > 1 multiplies, else -i adds. Without -f, collie multiplies by 2 unless -i was given.
  if (factorGiven) {
    o->stepFactor = static_cast<size_t>(factor);
  } else if (stepGiven) {
    o->stepFactor = 1;
  }
  if (o->stepFactor <= 1 && o->stepBytes == 0) return bad("stepbytes", "0");
  if (o->minBytes > o->maxBytes) {
    std::fprintf(stderr, "%s: invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", prog, o->minBytes,
                 o->maxBytes);
    return 2;
  }
  if (o->nThreads != 1) {
    std::fprintf(stderr, "%s: -t %d: one thread per process only; run one process per rank (collierun -n N)\n", prog,
                 o->nThreads);
    return 2;
  }
  if (o->nGpus != 0 && o->nGpus != 1) {
    std::fprintf(stderr,
                 "%s: -g %d: one GPU per rank at most; run one process per GPU (collierun -n N ... -g 1), or -g 0 "
                 "for host buffers\n",
                 prog, o->nGpus);
    return 2;
  }
  return -1;
}

// ---- Errors -----------------------------------------------------------------------------------------------------

const char* g_prog = "collie_perf";
int g_rank = -1;
collieComm_t g_comm = nullptr;

[[noreturn]] void Die(const char* call, collieResult_t r) {
  std::fprintf(stderr, "%s: rank %d: %s failed: %s: %s\n", g_prog, g_rank, call, collieGetErrorString(r),
               collieGetLastError(g_comm));
  std::fflush(stdout);
  std::exit(2);
}

#define PERF_CHECK(call)                               \
  do {                                                 \
    const collieResult_t perf_r_ = (call);             \
    if (perf_r_ != collieSuccess) Die(#call, perf_r_); \
  } while (0)

// ---- Data --------------------------------------------------------------------------------------------------------

enum class Gen { kNone, kSum, kProd, kMinMax, kAvg };

Gen GenFor(bool reduction, collieRedOp_t op) {
  if (!reduction) return Gen::kNone;
  switch (op) {
    case collieSum:
    case kPreMulSum:
      return Gen::kSum;
    case collieProd:
      return Gen::kProd;
    case collieAvg:
      return Gen::kAvg;
    default:
      return Gen::kMinMax;
  }
}

double InputValue(Gen gen, int r, int n, size_t i) {
  switch (gen) {
    case Gen::kSum: {
      const size_t k = static_cast<size_t>(std::clamp(120 / std::max(n, 1), 1, 8));
      return static_cast<double>((static_cast<size_t>(r) * 5 + (i % k) * 3) % k + 1);
    }
    case Gen::kProd:
      return (r < 42 && (i + static_cast<size_t>(r)) % 7 == 0) ? 2.0 : 1.0;
    case Gen::kMinMax:
      return static_cast<double>((static_cast<size_t>(r) * 3 + i) % 11 + 1);
    case Gen::kAvg: {
      const double d = (n % 2 == 1 && r == n - 1) ? 0.0 : (r % 2 == 0 ? 1.0 : -1.0);
      return static_cast<double>(i % 4 + 2) + d;
    }
    case Gen::kNone:
      break;
  }
  return static_cast<double>((static_cast<size_t>(r) * 13 + (i % 97) * 7) % 97 + 1);
}

}  // namespace

// premulsum doubles some inputs (PreMulFactor): its values are sized for twice the ranks, so that sums fit int8.
int CheckContext::SizingRanks() const { return op_ == kPreMulSum ? 2 * nranks_ : nranks_; }

double CheckContext::Input(int r, size_t idx) const {
  return InputValue(GenFor(reduction_, op_), r, SizingRanks(), idx);
}

double CheckContext::Reduced(size_t idx) const {
  const Gen gen = GenFor(reduction_, op_);
  double acc = InputValue(gen, 0, SizingRanks(), idx) * (op_ == kPreMulSum ? PreMulFactor(0) : 1);
  for (int r = 1; r < nranks_; ++r) {
    const double v = InputValue(gen, r, SizingRanks(), idx) * (op_ == kPreMulSum ? PreMulFactor(r) : 1);
    switch (op_) {
      case collieProd:
        acc *= v;
        break;
      case collieMax:
        acc = std::max(acc, v);
        break;
      case collieMin:
        acc = std::min(acc, v);
        break;
      default:
        acc += v;
        break;  // sum, avg
    }
  }
  return op_ == collieAvg ? acc / nranks_ : acc;
}

double CheckContext::Unchecked() { return std::nan(""); }

namespace {

void FillInput(void* buf, const TypeInfo& t, size_t n, const CheckContext& ctx) {
  Dispatch(t.type, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    for (size_t i = 0; i < n; ++i) p[i] = FromDouble<T>(ctx.Input(ctx.rank(), i));
  });
}

int64_t CountWrong(const void* buf, const TypeInfo& t, const Collective& coll, const CheckContext& ctx,
                   collieRedOp_t op) {
  const double tol = (coll.hasOp && op == collieAvg) ? t.avgTolerance : 0.0;
  int64_t wrong = 0;
  Dispatch(t.type, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(buf);
    for (size_t j = 0; j < ctx.counts().recv; ++j) {
      const double e = coll.expected(ctx, j);
      if (std::isnan(e)) continue;
      const double want = ToDouble(FromDouble<T>(e)), got = ToDouble(p[j]);
      const bool ok = tol == 0 ? got == want : std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
      if (!ok) ++wrong;
    }
  });
  return wrong;
}

// ---- Driver ------------------------------------------------------------------------------------------------------

// A call faster than this was not timed meaningfully (the clock and the loop dominate): no bandwidth for it.
constexpr double kMinTimedSeconds = 1e-6;

struct Result {
  bool valid = false;
  bool timed = true;  // false: the call took under kMinTimedSeconds, algbw and busbw are N/A
  double us = 0, algbw = 0, busbw = 0;
  int64_t wrong = -1;                       // -1: not checked
  std::string algo = "-", transport = "-";  // what the communicator ran for the last timed call
};

struct Row {
  size_t bytes, count;
  const char* type;
  const char* op;
  int root;
  Result oop, ip;
};

/** The row's algorithm: the out-of-place call's, "oop/ip" when the in-place call ran another one. */
std::string RowAlgo(const Row& row) {
  if (!row.ip.valid || row.ip.algo == row.oop.algo) return row.oop.algo;
  if (!row.oop.valid) return row.ip.algo;
  return row.oop.algo + "/" + row.ip.algo;
}

std::string RowTransport(const Row& row) {
  if (!row.ip.valid || row.ip.transport == row.oop.transport) return row.oop.transport;
  if (!row.oop.valid) return row.ip.transport;
  return row.oop.transport + "/" + row.ip.transport;
}

struct RankInfo {  // gathered to rank 0 for the "# Using devices" lines
  int32_t rank;
  int32_t pid;
  int32_t device;  // the GPU with -g 1, else 0
  char host[64];
  char what[96];  // "[cpu] <model>", or with -g 1 "[0x1b] <GPU name>"
};

/** The buffers' size: the largest of the sweep, in whole pages. */
size_t BufferBytes(const Options& o) { return std::max<size_t>((o.maxBytes + 4095) / 4096 * 4096, 4096); }

/** This rank's index among the ranks on its host: from the launcher, else counted from the gathered host names. */
int LocalRank(const std::vector<RankInfo>& all, int rank) {
  for (const char* var : {"COLLIE_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    int v = 0;
    if (const char* s = getenv(var); s && ParseInt(s, &v) && v >= 0) return v;
  }
  int local = 0;
  for (int r = 0; r < rank; ++r) local += std::strcmp(all[r].host, all[rank].host) == 0;
  return local;
}

std::string CpuModel() {
  std::string model = "cpu";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "model name", 10) != 0) continue;
      const char* colon = std::strchr(line, ':');
      if (colon) {
        model = colon + 1 + (colon[1] == ' ');
        while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
      }
      break;
    }
    std::fclose(f);
  }
  return model;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", ch);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

class Runner {
 public:
  /** dev: the rank's GPU with -g 1 (its buffers are used), else null (host buffers). */
  Runner(const Collective& coll, const Options& opt, collieComm_t comm, int rank, int nranks, Device* dev)
      : coll_(coll), opt_(opt), comm_(comm), rank_(rank), nranks_(nranks), dev_(dev), bufBytes_(BufferBytes(opt)) {
    if (dev_) {
      send_ = dev_->hostSend();
      recv_ = dev_->hostRecv();
      callSend_ = dev_->send();
      callRecv_ = dev_->recv();
      stream_ = dev_->stream();
      return;
    }
    send_ = static_cast<char*>(std::aligned_alloc(4096, bufBytes_));
    recv_ = static_cast<char*>(std::aligned_alloc(4096, bufBytes_));
    if (!send_ || !recv_) {
      std::fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", g_prog, rank, bufBytes_);
      std::exit(2);
    }
    std::memset(send_, 0, bufBytes_);  // touch every page before timing
    std::memset(recv_, 0, bufBytes_);
    callSend_ = send_;
    callRecv_ = recv_;
  }
  ~Runner() {
    if (dev_) return;  // the Device owns its buffers
    std::free(send_);
    std::free(recv_);
  }

  /** Runs the sweep of one type and op, printing rows on rank 0. */
  void Sweep(const TypeInfo& t, const OpInfo& op) {
    const int root = coll_.hasRoot ? opt_.root : -1;
    collieRedOp_t callOp = op.op;  // premulsum: this type's op, made for the sweep
    const bool madeOp = coll_.hasOp && op.op == kPreMulSum;
    if (madeOp) {
      Dispatch(t.type, [&](auto tag) {
        auto factor = FromDouble<decltype(tag)>(PreMulFactor(rank_));
        PERF_CHECK(collieRedOpCreatePreMulSum(&callOp, &factor, t.type, collieScalarHostImmediate, comm_));
      });
    }
    for (size_t size = opt_.minBytes; size <= opt_.maxBytes;) {
      const Counts c = coll_.counts(size / t.size, nranks_);
      Row row{std::max(c.send, c.recv) * t.size, c.param, t.name, coll_.hasOp ? op.name : "none", root, {}, {}};
      row.oop = Measure(t, op.op, callOp, c, row.bytes, false);
      if (coll_.inPlace) row.ip = Measure(t, op.op, callOp, c, row.bytes, true);
      if (rank_ == 0) PrintRow(row);
      rows_.push_back(row);
      if (opt_.stepFactor > 1) {
        const size_t next = size == 0 ? 1 : size * opt_.stepFactor;
        if (next <= size) break;  // overflow
        size = next;
      } else {
        if (size + opt_.stepBytes <= size) break;
        size += opt_.stepBytes;
      }
    }
    if (madeOp) PERF_CHECK(collieRedOpDestroy(callOp, comm_));
  }

  const std::vector<Row>& rows() const { return rows_; }
  int64_t untimed() const { return untimed_; }
  int64_t failedChecks() const { return failedChecks_; }

 private:
  // `op` names the reduction (kOps); `callOp` is what the calls pass (op, or the op made for premulsum).
  Result Measure(const TypeInfo& t, collieRedOp_t op, collieRedOp_t callOp, const Counts& c, size_t bytes,
                 bool inPlace) {
    // Byte offsets into the send / receive buffer; in place both lie in the receive buffer. Host images (send_,
    // recv_) and the buffers of the call (callSend_, callRecv_) have the same layout; with host buffers they are
    // the same memory.
    const size_t sendOff = inPlace ? rank_ * c.sendInplaceOff * t.size : 0;
    const size_t recvOff = inPlace ? rank_ * c.recvInplaceOff * t.size : 0;
    char* const sendp = (inPlace ? callRecv_ : callSend_) + sendOff;
    char* const recvp = callRecv_ + recvOff;
    const int root = coll_.hasRoot ? opt_.root : 0;
    auto call = [&] { PERF_CHECK(coll_.run(sendp, recvp, c.param, t.type, callOp, root, comm_, stream_)); };
    Result res;
    res.valid = true;
    if (opt_.check > 0) {
      const CheckContext ctx(rank_, nranks_, root, op, coll_.hasOp, c);
      const size_t span = std::max(c.send, c.recv) * t.size;
      std::memset(recv_, 0, span);
      FillInput((inPlace ? recv_ : send_) + sendOff, t, c.send, ctx);
      if (dev_) {  // the same bytes on the device
        dev_->Copy(callRecv_, recv_, span);
        if (!inPlace) dev_->Copy(callSend_, send_, c.send * t.size);
      }
      call();
      if (dev_) {
        dev_->Copy(recv_, callRecv_, span);
        Synchronize();
      }
      int64_t wrong = CountWrong(recv_ + recvOff, t, coll_, ctx, op);
      if (wrong) ++failedChecks_;
      PERF_CHECK(collieAllReduce(&wrong, &wrong, 1, collieInt64, collieSum, comm_, nullptr));
      res.wrong = wrong;
    }
    for (int i = 0; i < opt_.warmup; ++i) call();
    if (dev_) Synchronize();
    PERF_CHECK(collieBarrier(comm_));
    const auto t0 = std::chrono::steady_clock::now();
    if (dev_) dev_->RecordStart();
    for (int i = 0; i < opt_.iters; ++i) {
      call();
      if (opt_.blocking) {
        if (dev_) Synchronize();
        if (i == opt_.iters - 1) RecordLastCall(&res);  // before the barrier, itself a call
        PERF_CHECK(collieBarrier(comm_));
      }
    }
    if (!opt_.blocking) RecordLastCall(&res);  // before CombineTime's own collectives
    double sec = 0;
    if (dev_) {
      dev_->RecordStop();
      Synchronize();
      sec = dev_->ElapsedSeconds() / opt_.iters;
    } else {
      sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / opt_.iters;
    }
    CombineTime(&sec);
    res.us = sec * 1e6;
    res.timed = sec >= kMinTimedSeconds && !(nranks_ == 1 && inPlace);  // one rank in place: a no-op
    res.algbw = res.timed ? static_cast<double>(bytes) / 1e9 / sec : 0;
    res.busbw = res.algbw * coll_.busFactor(nranks_);
    if (!res.timed) ++untimed_;
    return res;
  }

  /** What the communicator ran for its most recent call: the algorithm and the transport(s) of its peers. */
  void RecordLastCall(Result* res) const {
    const collie::CallInfo info = collie::lastCallOf(comm_);
    if (!info.algorithm.empty()) res->algo = info.algorithm;
    if (!info.transport.empty()) res->transport = info.transport;
  }

  /** -g 1: waits for the stream; a collective that failed on it (reported asynchronously) ends the run. */
  void Synchronize() {
    dev_->Synchronize();
    collieResult_t async = collieSuccess;
    PERF_CHECK(collieCommGetAsyncError(comm_, &async));
    if (async != collieSuccess) Die("a collective on device buffers", async);
  }

  void CombineTime(double* sec) {
    switch (opt_.average) {
      case 0:
        PERF_CHECK(collieBroadcast(sec, sec, 1, collieFloat64, 0, comm_, nullptr));
        break;
      case 2:
        PERF_CHECK(collieAllReduce(sec, sec, 1, collieFloat64, collieMin, comm_, nullptr));
        break;
      case 3:
        PERF_CHECK(collieAllReduce(sec, sec, 1, collieFloat64, collieMax, comm_, nullptr));
        break;
      default:
        PERF_CHECK(collieAllReduce(sec, sec, 1, collieFloat64, collieSum, comm_, nullptr));
        *sec /= nranks_;
        break;
    }
  }

  static void PrintResult(const Result& r) {
    if (!r.valid) {
      std::printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
      return;
    }
    char time[32], wrong[32];
    std::snprintf(time, sizeof time, r.us >= 10000.0 ? "%7.0f" : r.us >= 100.0 ? "%7.1f" : "%7.2f", r.us);
    if (r.wrong < 0) {
      std::snprintf(wrong, sizeof wrong, "%5s", "N/A");
    } else {
      std::snprintf(wrong, sizeof wrong, "%5lld", static_cast<long long>(r.wrong));
    }
    if (!r.timed) {
      std::printf("  %7s  %6s  %6s  %5s", time, "N/A", "N/A", wrong);
      return;
    }
    std::printf("  %7s  %6.2f  %6.2f  %5s", time, r.algbw, r.busbw, wrong);
  }

  static void PrintRow(const Row& row) {
    std::printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, row.type, row.op, row.root);
    PrintResult(row.oop);
    PrintResult(row.ip);
    std::printf("  %8s  %9s\n", RowAlgo(row).c_str(), RowTransport(row).c_str());
  }

  const Collective& coll_;
  const Options& opt_;
  collieComm_t comm_;
  int rank_, nranks_;
  Device* dev_;
  size_t bufBytes_;
  char* send_ = nullptr;  // host buffers: those of the call, or with -g 1 the images copied in and out
  char* recv_ = nullptr;
  char* callSend_ = nullptr;  // what the call is given: send_ / recv_, or the device buffers
  char* callRecv_ = nullptr;
  collieStream_t stream_ = nullptr;
  std::vector<Row> rows_;
  int64_t failedChecks_ = 0;
  int64_t untimed_ = 0;  // results whose call was too short to time
};

void PrintHeader(const Options& o, const std::vector<RankInfo>& ranks) {
  const bool factor = o.stepFactor > 1;
  std::printf(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
      "validation: %d graph: 0\n",
      o.nThreads, o.nGpus, o.minBytes, o.maxBytes, factor ? o.stepFactor : o.stepBytes, factor ? "factor" : "bytes",
      o.warmup, o.iters, o.check);
  std::printf("# Algorithm: %s\n", o.algo.c_str());
  if (o.blocking) std::printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
  std::printf("#\n# Using devices\n");
  for (const RankInfo& r : ranks)
    std::printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n", r.rank, 0, r.pid, r.host, r.device, r.what);
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
              "", "", "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %8s  %9s\n", "size", "count", "type",
              "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "algo",
              "transport");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %8s  %9s\n", "(B)", "(elements)",
              "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(as ran)", "(rank 0)");
}

void WriteResultJson(FILE* f, const Result& r) {
  if (!r.valid) {
    std::fprintf(f, "null");
    return;
  }
  if (r.timed) {
    std::fprintf(f, "{\"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": ", r.us, r.algbw, r.busbw);
  } else {  // too short to time: no bandwidth
    std::fprintf(f, "{\"time_us\": %.3f, \"algbw\": null, \"busbw\": null, \"wrong\": ", r.us);
  }
  if (r.wrong < 0) {
    std::fprintf(f, "null}");
  } else {
    std::fprintf(f, "%lld}", static_cast<long long>(r.wrong));
  }
}

void WriteJson(FILE* f, const Collective& coll, const Options& o, int nranks, const char* host,
               const std::vector<Row>& rows, double avgBusbw, int64_t errors) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::fprintf(f, "{\n  \"collective\": %s,\n  \"nranks\": %d,\n  \"host\": %s,\n  \"date\": \"%s\",\n",
               JsonString(coll.name).c_str(), nranks, JsonString(host).c_str(), date);
  std::fprintf(f, "  \"collie_version\": %d,\n", COLLIE_VERSION);
  std::fprintf(f,
               "  \"params\": {\"minBytes\": %zu, \"maxBytes\": %zu, \"stepBytes\": %zu, \"stepFactor\": %zu, "
               "\"iters\": %d, \"warmup_iters\": %d, \"check\": %d, \"average\": %d, \"blocking\": %d, "
               "\"root\": %d, \"algo\": %s, \"ngpus\": %d},\n",
               o.minBytes, o.maxBytes, o.stepBytes, o.stepFactor, o.iters, o.warmup, o.check, o.average, o.blocking,
               coll.hasRoot ? o.root : -1, JsonString(o.algo.c_str()).c_str(), o.nGpus);
  std::fprintf(f, "  \"rows\": [");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "%s\n    {\"size\": %zu, \"count\": %zu, \"dtype\": \"%s\", \"op\": \"%s\", \"root\": %d, "
                 "\"algorithm\": %s, \"transport\": %s, \"out_of_place\": ",
                 i ? "," : "", r.bytes, r.count, r.type, r.op, r.root, JsonString(RowAlgo(r)).c_str(),
                 JsonString(RowTransport(r)).c_str());
    WriteResultJson(f, r.oop);
    std::fprintf(f, ", \"in_place\": ");
    WriteResultJson(f, r.ip);
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ],\n  \"avg_busbw\": %g,\n  \"out_of_bounds\": %lld\n}\n", avgBusbw,
               static_cast<long long>(errors));
}

}  // namespace

int RunPerf(int argc, char** argv, const Collective& coll) {
  setlinebuf(stdout);
  g_prog = argv[0];
  Options opt;
  if (const int rc = ParseArgs(argc, argv, &opt); rc >= 0) return rc;

  // -A forces the algorithm through COLLIE_ALGO, which the library reads at init; auto leaves the choice to it.
  if (opt.algo == "auto") {
    unsetenv("COLLIE_ALGO");
  } else if (!opt.algo.empty()) {
    setenv("COLLIE_ALGO", opt.algo.c_str(), 1);
  }
  if (opt.algo.empty()) opt.algo = getenv("COLLIE_ALGO") && *getenv("COLLIE_ALGO") ? getenv("COLLIE_ALGO") : "auto";

  // Under a launcher, one rank per process; run bare (no launcher's variables), a single rank, as nccl-tests does.
  bool launched = false;
  for (const char* var : {"COLLIE_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) launched |= !!getenv(var);
  if (launched) {
    PERF_CHECK(collieCommInitFromEnv(&g_comm, nullptr));
  } else {
    std::fprintf(stderr,
                 "%s: warning: no launcher environment (COLLIE_RANK, RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID): "
                 "running ONE rank in this process, so nothing is communicated (busbw 0). For N ranks run: "
                 "collierun -n N %s ...\n",
                 g_prog, g_prog);
    PERF_CHECK(collieCommInitAll(&g_comm, 1, nullptr));
  }
  int nranks = 0;
  PERF_CHECK(collieCommUserRank(g_comm, &g_rank));
  PERF_CHECK(collieCommCount(g_comm, &nranks));
  if (coll.hasRoot && opt.root >= nranks) {
    if (g_rank == 0) std::fprintf(stderr, "%s: invalid root %d: %d ranks\n", g_prog, opt.root, nranks);
    PERF_CHECK(collieCommDestroy(g_comm));
    return 2;
  }

  RankInfo mine{};
  mine.rank = g_rank;
  mine.pid = static_cast<int32_t>(getpid());
  gethostname(mine.host, sizeof mine.host - 1);
  std::snprintf(mine.what, sizeof mine.what, "[cpu] %s", CpuModel().c_str());
  std::vector<RankInfo> all(nranks);
  PERF_CHECK(collieAllGather(&mine, all.data(), sizeof(RankInfo), collieUint8, g_comm, nullptr));

  // -g 1: every rank opens its GPU; if any cannot, each says why and all stop.
  std::unique_ptr<Device> dev;
  if (opt.nGpus > 0) {
    std::string why;
    dev = OpenDevice(LocalRank(all, g_rank), BufferBytes(opt), &why);
    int ok = dev != nullptr;
    if (!ok) std::fprintf(stderr, "%s: rank %d: %s\n", g_prog, g_rank, why.c_str());
    PERF_CHECK(collieAllReduce(&ok, &ok, 1, collieInt32, collieMin, g_comm, nullptr));
    if (!ok) {
      dev.reset();
      PERF_CHECK(collieCommDestroy(g_comm));
      return 2;
    }
    mine.device = dev->ordinal();
    std::snprintf(mine.what, sizeof mine.what, "%s", dev->description().c_str());
    PERF_CHECK(collieAllGather(&mine, all.data(), sizeof(RankInfo), collieUint8, g_comm, nullptr));
  }

  // Open the JSON file up front so that a bad path fails every rank before the sweep.
  FILE* json = nullptr;
  int jsonOk = 1;
  if (g_rank == 0 && !opt.json.empty()) {
    json = std::fopen(opt.json.c_str(), "w");
    if (!json) {
      std::fprintf(stderr, "%s: cannot write %s: %s\n", g_prog, opt.json.c_str(), std::strerror(errno));
      jsonOk = 0;
    }
  }
  PERF_CHECK(collieBroadcast(&jsonOk, &jsonOk, 1, collieInt32, 0, g_comm, nullptr));
  if (!jsonOk) {
    PERF_CHECK(collieCommDestroy(g_comm));
    return 2;
  }

  if (g_rank == 0) PrintHeader(opt, all);
  Runner runner(coll, opt, g_comm, g_rank, nranks, dev.get());
  const std::vector<OpInfo> noOp{{"none", collieSum}};
  try {
    for (const TypeInfo& t : opt.types)
      for (const OpInfo& op : coll.hasOp ? opt.ops : noOp) runner.Sweep(t, op);
  } catch (const std::exception& e) {  // a CUDA call failed (perf_cuda.hpp)
    std::fprintf(stderr, "%s: rank %d: %s\n", g_prog, g_rank, e.what());
    std::fflush(stdout);
    std::exit(2);
  }

  int64_t errors = runner.failedChecks();
  PERF_CHECK(collieAllReduce(&errors, &errors, 1, collieInt64, collieSum, g_comm, nullptr));
  double bwSum = 0;
  int bwCount = 0;
  for (const Row& r : runner.rows())
    for (const Result* res : {&r.oop, &r.ip})
      if (res->valid && res->timed) {
        bwSum += res->busbw;
        ++bwCount;
      }
  const double avgBusbw = bwCount ? bwSum / bwCount : 0;
  if (g_rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(errors), errors ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g GB/s\n", avgBusbw);
    if (runner.untimed() > 0)
      std::printf("# N/A algbw/busbw: %s the call took under %.0f us, too short to time\n",
                  nranks == 1 ? "one rank in place moves no data, or" : "", kMinTimedSeconds * 1e6);
    std::printf("#\n");
    std::printf("%s\n", collieGetLastError(nullptr));
    if (json) {
      WriteJson(json, coll, opt, nranks, all[0].host, runner.rows(), avgBusbw, errors);
      std::fclose(json);
    }
  }
  PERF_CHECK(collieCommDestroy(g_comm));
  g_comm = nullptr;
  return errors ? 1 : 0;
}

}  // namespace collie_perf
