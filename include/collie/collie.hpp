// collie.hpp: the C++ API of collie.
//
// A Communicator is one rank's membership of a group of ranks. Blocking calls return when the result is in
// the output buffer; the *Async calls return a Work handle to wait on. Errors are thrown as collie::Error,
// whose code() is one of the collieResult_t values of collie.h. The C API (collie.h) is built on this one.
#pragma once

#include <collie/collie.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace collie {

/// Element types; values equal collieDataType_t.
enum class DataType : int {
  Int8 = 0,
  Uint8 = 1,
  Int32 = 2,
  Uint32 = 3,
  Int64 = 4,
  Uint64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  Bfloat16 = 9,
};

/// Reduction operations; values equal collieRedOp_t. PreMulSum comes only with its factor: Reduction::preMulSum.
enum class ReduceOp : int { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4, PreMulSum = 5 };

/// Failure kinds; values equal collieResult_t.
enum class ErrorCode : int {
  Success = 0,
  UnhandledCudaError = 1,
  SystemError = 2,
  InternalError = 3,
  InvalidArgument = 4,
  InvalidUsage = 5,
  RemoteError = 6,
  InProgress = 7,
  Timeout = 8,
};

/// The exception every collie C++ call throws.
class COLLIE_EXPORT Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// 16-bit float storage types, so that typed spans of half and bfloat16 data can be passed.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

/// The DataType of a C++ element type.
template <typename T>
constexpr DataType dataTypeOf() {
  if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, char>)
    return DataType::Int8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DataType::Uint8;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DataType::Int32;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return DataType::Uint32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DataType::Int64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return DataType::Uint64;
  else if constexpr (std::is_same_v<T, Half>)
    return DataType::Float16;
  else if constexpr (std::is_same_v<T, float>)
    return DataType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::Float64;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DataType::Bfloat16;
  else
    static_assert(sizeof(T) == 0, "collie: unsupported element type");
}

/// What a reducing call computes: a ReduceOp, or the sum of every rank's input first multiplied by that rank's own
/// factor (NCCL's ncclRedOpCreatePreMulSum: ranks may pass different factors). The factor is one element of the
/// call's type (a float factor for float data; half and bfloat16 multiply through float, rounding once; integers
/// wrap), and the call is refused when the types differ. Every ReduceOp converts to a Reduction.
class COLLIE_EXPORT Reduction {
 public:
  Reduction(ReduceOp op) : op_(op) {}  // NOLINT(google-explicit-constructor): every ReduceOp is a Reduction
  template <typename T>
  static Reduction preMulSum(T factor) {
    return preMulSum(&factor, dataTypeOf<T>());
  }
  /// `factor` points to one element of `type`, copied now (InvalidArgument: NULL, or a type outside DataType).
  static Reduction preMulSum(const void* factor, DataType type);
  ReduceOp op() const { return op_; }
  /// PreMulSum: the DataType the factor was made for; -1 when none was (a bare ReduceOp::PreMulSum, refused).
  int factorType() const { return factorType_; }
  /// The factor's bytes (one element of factorType()), in the first bytes of this word.
  uint64_t factorBits() const { return factorBits_; }

 private:
  ReduceOp op_;
  int factorType_ = -1;
  uint64_t factorBits_ = 0;
};

/// Root address plus random secret; made by one process, shared with every rank.
struct COLLIE_EXPORT UniqueId {
  collieUniqueId raw{};
  /// Creates an id and starts the bootstrap root (a thread of this process) that serves one init.
  static UniqueId create();
  /// A 256-character hex form, for environment variables and command lines.
  std::string toString() const;
  static UniqueId fromString(const std::string& text);
};

/// Per-communicator options (collieConfig_t in the C API).
/// When a communicator connects to its peers (COLLIE_CONNECT). Every rank of a communicator must end with the same
/// mode: init (or a split) fails on every rank naming it otherwise.
enum class ConnectMode {
  Default,  ///< COLLIE_CONNECT (lazy unless set to eager; eager where a transport cannot dial at any time)
  Lazy,     ///< a peer is connected when a call first needs it
  Eager,    ///< every pair is connected at init, so that init fails early when a peer cannot be reached
};

struct Options {
  /// How long a call waits on a silent peer; zero means the COLLIE_TIMEOUT param.
  std::chrono::milliseconds timeout{0};
  /// Name used in logs and error messages.
  std::string name;
  /// When peers are connected; communicators split or shrunk from this one inherit it unless set there.
  ConnectMode connect = ConnectMode::Default;
  /// Split only (NCCL's splitShare): the new communicator uses this one's connections, making a pair's connection
  /// only where neither has it yet (then both use it), so it costs no descriptor or handshake for a pair this one has
  /// connected. The price: the communicators that share run one call at a time on each rank, in the order issued (a
  /// call on one waits, when issued, for the calls issued before it on the others to end, async ones included), and
  /// must be called in the same order on every rank (a rank that calls them in another order fails with a
  /// mismatch); a failure or abort of one fails them all; they may not be mixed in one group (InvalidUsage); every
  /// rank of a color must pass the same value. Either may be destroyed first.
  bool shareConnections = false;
};

/// What a communicator ran for its most recent collective call (for tools, tests and the perf table).
struct CallInfo {
  std::string collective;  ///< "allreduce", ... (empty before the first call)
  std::string algorithm;   ///< "ring", "tree", "rhd", "direct", ... as the executor ran it
  std::string transport;   ///< transports of the peers the schedule used, e.g. "shm", "tcp", "shm+tcp", "self"
  size_t bytes = 0;        ///< bytes per rank of the call
  size_t sliceBytes = 0;
};

/// One collective and algorithm in a communicator's statistics (Communicator::stats).
struct CollectiveStats {
  std::string collective;  ///< "AllReduce", "Broadcast", ..., "Send", "Recv"
  std::string algorithm;   ///< "ring", "direct", "tree", "rhd", ...
  uint64_t calls = 0;      ///< the user's calls of this collective that ran this algorithm
  uint64_t bytes = 0;      ///< their bytes per rank, summed
  double seconds = -1;     ///< their time, summed (a group's time shared among its calls); -1 when not timed
};

/// What a communicator did so far, aggregated (Communicator::stats): the user's calls, not init's.
struct CommStats {
  std::vector<CollectiveStats> rows;  ///< collectives in API order, then algorithms; only those that ran
  /// True when calls are timed: COLLIE_STATS=1, COLLIE_TRACE or COLLIE_FLIGHT_RECORDER set (two clock reads per
  /// call); otherwise only counts and bytes are kept and every `seconds` is -1.
  bool timed = false;
  std::string summary;  ///< the table printed at destroy with COLLIE_STATS=1 (or COLLIE_DEBUG=INFO)
};

/// The peer of a receive from any source (recv, recvAsync): it takes the first message sent to this rank by any
/// other rank. Communicator::recvAny returns which rank that was, and so does Work::source().
constexpr int kAnySource = -1;

class Communicator;
struct InternalAccess;  // the library's own access to the internals (not part of the API)

/// Handle of an async call; copies share the same operation.
class COLLIE_EXPORT Work {
 public:
  struct State;  ///< opaque completion state, shared with the communicator

  Work() = default;
  /// True when the operation finished (successfully or not); never blocks.
  bool test() const;
  /// Blocks until the operation is done; throws its Error if it failed.
  void wait() const;
  /// The failure, if the operation is done and failed; ErrorCode::Success otherwise.
  ErrorCode error() const;
  /// The message of the failure, empty when none.
  std::string errorMessage() const;
  /// A receive from any source: the rank whose message it took, once done (-1 before, and for any other call).
  int source() const;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class Communicator;
  friend struct InternalAccess;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

/// One rank's communicator. Not copyable; destroy it on every rank. Its calls run in the order they are made; every
/// rank must make the same calls in the same order (a difference is reported as a mismatch where the calls differ,
/// but two calls of the same shape swapped cannot be told apart), so make a communicator's calls, split and shrink
/// included, from one thread at a time, as NCCL requires: calls from two threads at once meet in whichever order the
/// threads come, which may differ between ranks. stats() and abort() may be called from any thread.
class COLLIE_EXPORT Communicator {
 public:
  /// Joins the communicator `id` as `rank` of `nranks`; blocks until all ranks have joined.
  static std::unique_ptr<Communicator> create(int nranks, const UniqueId& id, int rank, const Options& options = {});
  /// Creates all nranks communicators in this process (one thread per rank during init).
  static std::vector<std::unique_ptr<Communicator>> createAll(int nranks, const Options& options = {});
  /// Creates the communicator from a launcher's environment (collierun, torchrun, Open MPI, Slurm).
  static std::unique_ptr<Communicator> createFromEnv(const Options& options = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;

  // Blocking collectives on host buffers. In place when send == recv (see collie.h for AllGather and
  // ReduceScatter).
  void allReduce(const void* send, void* recv, size_t count, DataType type, Reduction op);
  void broadcast(const void* send, void* recv, size_t count, DataType type, int root);
  void reduce(const void* send, void* recv, size_t count, DataType type, Reduction op, int root);
  void allGather(const void* send, void* recv, size_t sendCount, DataType type);
  void reduceScatter(const void* send, void* recv, size_t recvCount, DataType type, Reduction op);
  void allToAll(const void* send, void* recv, size_t count, DataType type);
  void send(const void* buf, size_t count, DataType type, int peer);
  /// peer = kAnySource: from whichever rank sends first (see recvAny).
  void recv(void* buf, size_t count, DataType type, int peer);
  /// Receives the first message sent to this rank by any other rank and returns that rank. Messages from one
  /// sender are taken in the order it sent them; the sender's count and type must be this call's. Not inside a
  /// group. Over the tcp and shm transports (InvalidUsage where a peer is linked by ucx). A peer that exits or
  /// dies is dropped: RemoteError once every other rank has, Timeout (naming the ranks waited on) when none sends.
  int recvAny(void* buf, size_t count, DataType type);
  void barrier();

  // Async forms: return at once; keep the buffers untouched until the Work is done.
  Work allReduceAsync(const void* send, void* recv, size_t count, DataType type, Reduction op);
  Work broadcastAsync(const void* send, void* recv, size_t count, DataType type, int root);
  Work reduceAsync(const void* send, void* recv, size_t count, DataType type, Reduction op, int root);
  Work allGatherAsync(const void* send, void* recv, size_t sendCount, DataType type);
  Work reduceScatterAsync(const void* send, void* recv, size_t recvCount, DataType type, Reduction op);
  Work allToAllAsync(const void* send, void* recv, size_t count, DataType type);
  Work sendAsync(const void* buf, size_t count, DataType type, int peer);
  Work recvAsync(void* buf, size_t count, DataType type, int peer);
  /// recvAny's async form: Work::source() names the sender once the Work is done.
  Work recvAnyAsync(void* buf, size_t count, DataType type);

  // Typed conveniences.
  template <typename T>
  void allReduce(std::span<const T> send, std::span<T> recv, Reduction op) {
    checkSpan(send.size(), recv.size(), "recv");
    allReduce(send.data(), recv.data(), send.size(), dataTypeOf<T>(), op);
  }
  template <typename T>
  void allReduce(std::span<T> inOut, Reduction op) {
    allReduce(inOut.data(), inOut.data(), inOut.size(), dataTypeOf<T>(), op);
  }
  template <typename T>
  Work allReduceAsync(std::span<T> inOut, Reduction op) {
    return allReduceAsync(inOut.data(), inOut.data(), inOut.size(), dataTypeOf<T>(), op);
  }
  template <typename T>
  void broadcast(std::span<T> inOut, int root) {
    broadcast(inOut.data(), inOut.data(), inOut.size(), dataTypeOf<T>(), root);
  }
  template <typename T>
  void allGather(std::span<const T> send, std::span<T> recv) {
    checkSpan(send.size() * static_cast<size_t>(size()), recv.size(), "recv");
    allGather(send.data(), recv.data(), send.size(), dataTypeOf<T>());
  }

  /// Splits by color (COLLIE_SPLIT_NOCOLOR returns null), ordering new ranks by key then old rank.
  std::unique_ptr<Communicator> split(int color, int key, const Options& options = {});
  /// The communicator of the ranks not in `exclude` (NCCL's ncclCommShrink): new ranks 0..n-1 in the order of
  /// the old ones. Works after a failure (a dead peer): it uses neither this communicator's connections nor its
  /// bootstrap root. Collective over the survivors, which all pass the same list; an excluded rank must not call
  /// it (InvalidUsage). This communicator stays as it was (destroy it, failed or not, when done with it).
  std::unique_ptr<Communicator> shrink(std::span<const int> exclude, const Options& options = {});
  /// Stops all work now; blocked and later calls fail with an error.
  void abort();
  /// The error hit in the background, or Success.
  ErrorCode asyncError() const;
  /// What this communicator ran for its most recent call (blocking, async or in a group; the last one executed).
  CallInfo lastCall() const;
  /// Counts, bytes, time and algorithm mix of every call so far, per collective (any thread; cheap to keep,
  /// see CommStats::timed).
  CommStats stats() const;
  /// How many other ranks this rank has a connection to (all of them after init with ConnectMode::Eager; with
  /// Lazy, those that the calls so far needed).
  int connectedPeers() const;
  /// How many other ranks' contact cards (where their transports listen) this rank holds: all of them by default;
  /// with COLLIE_PEER_CARDS=directory, those of its subtree in init's tree and of the peers it has met so far.
  /// Between calls.
  int knownContactCards() const;

  struct Impl;  ///< opaque

 private:
  friend struct InternalAccess;
  explicit Communicator(std::unique_ptr<Impl> impl);
  static void checkSpan(size_t want, size_t have, const char* what);
  std::unique_ptr<Impl> impl_;
};

/// Calls made on this thread between groupStart and groupEnd are issued together and complete at groupEnd. A call
/// refused inside a group (it throws: a bad argument, a failed communicator) refuses the whole group, as in NCCL:
/// groupEnd then issues none of its calls, fails their Works, and throws the first refusal's error (issuing the rest
/// would leave the refused call's peers waiting for it).
COLLIE_EXPORT void groupStart();
COLLIE_EXPORT void groupEnd();
/// Ends a group without waiting for it: its calls are issued together and run in the background; each call's Work
/// completes (or fails) with its communicator's part of the group. Every call in the group must be an async one
/// (sendAsync, allReduceAsync...): a blocking call in it is refused (InvalidUsage) and nothing is issued. On a
/// communicator that shares connections (Options::shareConnections) it first waits for its turn, as any call does. Like
/// groupEnd, it ends one level of nesting, and only the outermost end issues the group (by its own rule).
COLLIE_EXPORT void groupEndAsync();

/// Fails this thread's open group as a call refused inside it does: the outermost groupEnd (or groupEndAsync) issues
/// none of the group's calls, fails their Works and throws Error(code, why). For a caller that gives up building a
/// group (a check of its own failed halfway), so that no peer receives part of it. The first failure is kept. Outside a
/// group, or with a code that is no failure (Success, InProgress): InvalidUsage.
COLLIE_EXPORT void groupFail(ErrorCode code, const std::string& why);

/// "major.minor.patch"
COLLIE_EXPORT const char* versionString();

/// What the C API communicator `comm` ran for its most recent call (Communicator::lastCall); empty when comm is
/// null or its non-blocking init has not finished. For tools on the C API, such as the *_perf benchmarks.
COLLIE_EXPORT CallInfo lastCallOf(collieComm_t comm);

}  // namespace collie
