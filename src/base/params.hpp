// Every COLLIE_* tunable, defined once: name, type, default, allowed values, description. Each is read from the
// environment once, on first use, and cached; the first read of any of them checks every COLLIE_* variable that is
// set, so a bad value fails init with InvalidArgument naming the variable, the value and what is allowed.
// `collie-info` prints them all with their current values and what each allows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collie::base::params {

/// What a parameter allows. Words are comma-separated; Words compares case-insensitively, Exact exactly.
struct Rule {
  enum Kind {
    Range,        ///< an integer in [lo, hi]
    ZeroOrRange,  ///< 0 (let collie choose) or an integer in [lo, hi]
    Timeout,      ///< milliseconds in [lo, hi], or inf / never (waits for ever: kNeverMs)
    Words,        ///< one of words, any case
    Exact,        ///< one of words, exactly as written
    Subsys,       ///< a comma list of log subsystems, each optionally ^-prefixed, any case
    HostPort,     ///< host:port, port in 1..65535
    Hex32,        ///< 32 hex digits
    Text,         ///< any text
  };
  Kind kind;
  int64_t lo = 0;
  int64_t hi = 0;
  const char* words = nullptr;
};

/// COLLIE_TIMEOUT=inf / never: about 100 years, so that now() + timeout cannot overflow a steady_clock deadline.
inline constexpr int64_t kNeverMs = int64_t{100} * 365 * 24 * 3600 * 1000;

#define COLLIE_RULE_RANGE(lo, hi) (::collie::base::params::Rule{::collie::base::params::Rule::Range, lo, hi})
#define COLLIE_RULE_ZERO_OR_RANGE(lo, hi) \
  (::collie::base::params::Rule{::collie::base::params::Rule::ZeroOrRange, lo, hi})
#define COLLIE_RULE_TIMEOUT \
  (::collie::base::params::Rule{::collie::base::params::Rule::Timeout, 1, ::collie::base::params::kNeverMs})
#define COLLIE_RULE_WORDS(w) (::collie::base::params::Rule{::collie::base::params::Rule::Words, 0, 0, w})
#define COLLIE_RULE_EXACT(w) (::collie::base::params::Rule{::collie::base::params::Rule::Exact, 0, 0, w})
#define COLLIE_RULE_SUBSYS \
  (::collie::base::params::Rule{::collie::base::params::Rule::Subsys, 0, 0, "INIT,BOOTSTRAP,NET,COLL,TUNE,ENV,ALL"})
#define COLLIE_RULE_HOSTPORT (::collie::base::params::Rule{::collie::base::params::Rule::HostPort})
#define COLLIE_RULE_HEX32 (::collie::base::params::Rule{::collie::base::params::Rule::Hex32})
#define COLLIE_RULE_TEXT (::collie::base::params::Rule{::collie::base::params::Rule::Text})

// X(accessor, type, env name, default, rule, description). Types: Int (int64_t) or Str (std::string).
#define COLLIE_PARAM_LIST(X)                                                                                       \
  X(timeoutMs, Int, "COLLIE_TIMEOUT", "600000", COLLIE_RULE_TIMEOUT,                                               \
    "milliseconds a call (or init) waits on a live but silent peer before failing (default 10 min, as torch)")     \
  X(peerDeadTimeoutMs, Int, "COLLIE_PEER_DEAD_TIMEOUT", "20000", COLLIE_RULE_ZERO_OR_RANGE(1000, 3600000),         \
    "milliseconds after which an unreachable tcp peer is declared dead (keep-alive, TCP_INFO checked), whatever "  \
    "COLLIE_TIMEOUT is; 0: the kernel's defaults")                                                                 \
  X(flightRecorder, Str, "COLLIE_FLIGHT_RECORDER", "", COLLIE_RULE_TEXT,                                           \
    "path prefix: each rank writes its last calls to PREFIX.rank<R>.json on a failure, SIGUSR1 or destroy")        \
  X(flightRecorderEntries, Int, "COLLIE_FLIGHT_RECORDER_ENTRIES", "256", COLLIE_RULE_RANGE(0, 1048576),            \
    "calls each rank keeps in its flight recorder (0: none)")                                                      \
  X(flightRecorderDestroy, Int, "COLLIE_FLIGHT_RECORDER_DESTROY", "0", COLLIE_RULE_RANGE(0, 1),                    \
    "1: also write the flight recorder when a communicator is destroyed")                                          \
  X(trace, Str, "COLLIE_TRACE", "", COLLIE_RULE_TEXT,                                                              \
    "path prefix: each rank writes a timeline of its calls (Chrome trace JSON) to PREFIX.rank<R>.trace.json; "     \
    "tools/collie-trace merges them")                                                                              \
  X(stats, Int, "COLLIE_STATS", "0", COLLIE_RULE_RANGE(0, 1),                                                      \
    "1: time every call and print each communicator's per-collective summary at destroy (counts are always kept)") \
  X(debug, Str, "COLLIE_DEBUG", "WARN", COLLIE_RULE_WORDS("NONE,WARN,INFO,TRACE"),                                 \
    "log level: NONE, WARN, INFO or TRACE")                                                                        \
  X(debugSubsys, Str, "COLLIE_DEBUG_SUBSYS", "ALL", COLLIE_RULE_SUBSYS,                                            \
    "subsystems to log: INIT,BOOTSTRAP,NET,COLL,TUNE,ENV or ALL; ^NAME removes one")                               \
  X(debugFile, Str, "COLLIE_DEBUG_FILE", "", COLLIE_RULE_TEXT,                                                     \
    "write logs to this file (%h host, %p pid) instead of stderr")                                                 \
  X(socketIfname, Str, "COLLIE_SOCKET_IFNAME", "", COLLIE_RULE_TEXT,                                               \
    "network interfaces to use: prefixes (eth,ib), ^ to exclude, = for exact names; empty: first non-loopback")    \
  X(socketFamily, Str, "COLLIE_SOCKET_FAMILY", "", COLLIE_RULE_EXACT("AF_INET,AF_INET6,inet,inet6,ipv4,ipv6"),     \
    "AF_INET or AF_INET6 to force an address family")                                                              \
  X(socketsPerPeer, Int, "COLLIE_SOCKETS_PER_PEER", "2", COLLIE_RULE_RANGE(1, 64),                                 \
    "TCP sockets per peer; large messages are striped")                                                            \
  X(stripeMinBytes, Int, "COLLIE_STRIPE_MIN_BYTES", "262144", COLLIE_RULE_RANGE(0, INT64_MAX),                     \
    "TCP messages at least this large are split across a peer's sockets (unset: 1 MiB with 2 ranks)")              \
  X(connectMode, Str, "COLLIE_CONNECT", "lazy", COLLIE_RULE_WORDS("lazy,eager"),                                   \
    "lazy: connect a peer when a call first needs it (either side dials); eager: every pair at init; the same on " \
    "every rank (init checks)")                                                                                    \
  X(peerCards, Str, "COLLIE_PEER_CARDS", "all", COLLIE_RULE_WORDS("all,directory"),                                \
    "all: every rank keeps every rank's contact card from init; directory: only its subtree's in init's tree and " \
    "every rank's host, and learns a peer's card from the tree when it first connects to it; the same on every "   \
    "rank (init checks)")                                                                                          \
  X(connectRetries, Int, "COLLIE_CONNECT_RETRIES", "50", COLLIE_RULE_RANGE(0, 1000000),                            \
    "times a refused connection is retried during init (exponential backoff, capped by COLLIE_TIMEOUT)")           \
  X(sliceBytes, Int, "COLLIE_SLICE_BYTES", "0", COLLIE_RULE_ZERO_OR_RANGE(4096, 1073741824),                       \
    "pipeline slice size in bytes; 0 lets the tuner choose; the same on every rank (init checks)")                 \
  X(slicesInFlight, Int, "COLLIE_SLICES_IN_FLIGHT", "0", COLLIE_RULE_ZERO_OR_RANGE(1, 1024),                       \
    "receive slices posted ahead per step; 0 lets the tuner choose")                                               \
  X(initChunk, Int, "COLLIE_INIT_CHUNK", "0", COLLIE_RULE_ZERO_OR_RANGE(1, 1 << 30),                               \
    "entries (96 B each) per message of init's address table streamed down the bootstrap tree; 0: the table over " \
    "the tree's height, at least 683 (64 KiB); the same on every rank (init checks)")                              \
  X(spinUs, Int, "COLLIE_SPIN_US", "20", COLLIE_RULE_RANGE(0, 1000000),                                            \
    "microseconds a waiting rank polls before it sleeps")                                                          \
  X(algo, Str, "COLLIE_ALGO", "", COLLIE_RULE_TEXT,                                                                \
    "force an algorithm (NCCL grammar: ring, ^tree, allreduce:ring;...)")                                          \
  X(tuneFile, Str, "COLLIE_TUNE_FILE", "", COLLIE_RULE_TEXT,                                                       \
    "file of measured link costs per transport and reduction cost: read at init if present, else written")         \
  X(tuneMeasure, Int, "COLLIE_TUNE_MEASURE", "1", COLLIE_RULE_RANGE(0, 1),                                         \
    "1: measure alpha/beta (ping-pong) and gamma at init where no tuning file has them; 0: built-in costs")        \
  X(rootAddr, Str, "COLLIE_ROOT_ADDR", "", COLLIE_RULE_HOSTPORT,                                                   \
    "host:port of the bootstrap root for env init without COLLIE_UNIQUE_ID (default MASTER_ADDR:MASTER_PORT+1)")   \
  X(secret, Str, "COLLIE_SECRET", "", COLLIE_RULE_HEX32,                                                           \
    "shared secret for env init without COLLIE_UNIQUE_ID; ranks must agree (default: derived from the job)")       \
  X(net, Str, "COLLIE_NET", "auto", COLLIE_RULE_WORDS("auto,tcp,ucx"),                                             \
    "network transport: ucx (UCX: InfiniBand/RoCE, or UCX_TLS's choice), tcp, or auto (ucx where UCX reports "     \
    "an RDMA transport, else tcp); same-host peers use shm unless COLLIE_SHM_DISABLE=1")                           \
  X(hostId, Str, "COLLIE_HOST_ID", "", COLLIE_RULE_TEXT,                                                           \
    "for tests and containers: the host this process counts as (ranks with equal ids share a host; default: "      \
    "host name, boot id and network namespace); rank/K or rank%K: host = rank / K or rank mod K")                  \
  X(shmDisable, Int, "COLLIE_SHM_DISABLE", "0", COLLIE_RULE_RANGE(0, 1),                                           \
    "1: never use the shared-memory transport (same-host peers then use tcp)")                                     \
  X(shmSlots, Int, "COLLIE_SHM_SLOTS", "8", COLLIE_RULE_RANGE(1, 4096),                                            \
    "slots in the ring of each same-host peer pair and direction")                                                 \
  X(shmSlotBytes, Int, "COLLIE_SHM_SLOT_BYTES", "65536", COLLIE_RULE_RANGE(64, 1073741824),                        \
    "payload bytes per shm ring slot (rounded up to 64)")                                                          \
  X(shmSingleCopy, Int, "COLLIE_SHM_SINGLE_COPY", "1", COLLIE_RULE_RANGE(0, 2),                                    \
    "large shm messages in one copy: 0 never, 1 between threads and where process_vm_readv beats 2 memcpy, 2 "     \
    "wherever process_vm_readv is allowed")                                                                        \
  X(shmSingleCopyMinBytes, Int, "COLLIE_SHM_SINGLE_COPY_MIN_BYTES", "65536", COLLIE_RULE_RANGE(0, INT64_MAX),      \
    "shm messages at least this large take the single-copy path (when available)")                                 \
  X(shmBacking, Str, "COLLIE_SHM_BACKING", "memfd", COLLIE_RULE_EXACT("memfd,devshm"),                             \
    "shm segments: memfd (anonymous, never in /dev/shm) or devshm (shm_open in /dev/shm, unlinked at once)")       \
  X(pinThreads, Int, "COLLIE_PIN_THREADS", "0", COLLIE_RULE_RANGE(0, 1),                                           \
    "1: bind the progress thread to the CPUs of the NUMA node the communicator was created on")                    \
  X(cudaPlugin, Str, "COLLIE_CUDA_PLUGIN", "", COLLIE_RULE_TEXT,                                                   \
    "path of libcollie_cuda.so (default: next to libcollie, then the loader's search path)")

#define COLLIE_PARAM_DECLARE_Int(name) int64_t name();
#define COLLIE_PARAM_DECLARE_Str(name) const std::string& name();
#define COLLIE_PARAM_DECLARE(name, type, env, def, rule, desc) COLLIE_PARAM_DECLARE_##type(name)
COLLIE_PARAM_LIST(COLLIE_PARAM_DECLARE)
#undef COLLIE_PARAM_DECLARE

/// One row of the registry, for collie-info.
struct ParamInfo {
  const char* env;
  const char* type;
  const char* defaultValue;
  const char* description;
  std::string value;  ///< current value (after the environment)
  bool fromEnv;       ///< true when the environment set it
};
std::vector<ParamInfo> all();

/// The pure check behind every accessor: `text` as the value of parameter `env` (a COLLIE_* name in the registry).
/// Returns the value as the accessor would cache it (an integer in decimal for Int parameters; COLLIE_TIMEOUT=never
/// gives kNeverMs); throws InvalidArgument "ENV=TEXT: expected ..." for a bad value or an unknown name.
std::string validate(const std::string& env, const std::string& text);

/// What `env` allows, in words (e.g. "an integer in [1, 64]").
std::string allowed(const std::string& env);

/// Checks every registry variable set in the environment; throws the first bad one (as validate does).
void checkEnvironment();

}  // namespace collie::base::params
