// Every COLLIE_* tunable, defined once: name, type, default, description. Each is read from the environment
// once, on first use, and cached. `collie-info` prints them all with their current values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collie::base::params {

// X(accessor, type, env name, default, description). Types: Int (int64_t) or Str (std::string).
#define COLLIE_PARAM_LIST(X)                                                                                     \
  X(timeoutMs, Int, "COLLIE_TIMEOUT", "300000",                                                                  \
    "milliseconds a call (or init) waits on a silent peer before failing with a timeout")                        \
  X(debug, Str, "COLLIE_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE")                                  \
  X(debugSubsys, Str, "COLLIE_DEBUG_SUBSYS", "ALL",                                                              \
    "subsystems to log: INIT,BOOTSTRAP,NET,COLL,TUNE,ENV or ALL; ^NAME removes one")                             \
  X(debugFile, Str, "COLLIE_DEBUG_FILE", "", "write logs to this file (%h host, %p pid) instead of stderr")      \
  X(socketIfname, Str, "COLLIE_SOCKET_IFNAME", "",                                                               \
    "network interfaces to use: prefixes (eth,ib), ^ to exclude, = for exact names; empty: first non-loopback")  \
  X(socketFamily, Str, "COLLIE_SOCKET_FAMILY", "", "AF_INET or AF_INET6 to force an address family")             \
  X(socketsPerPeer, Int, "COLLIE_SOCKETS_PER_PEER", "2", "TCP sockets per peer; large messages are striped")     \
  X(stripeMinBytes, Int, "COLLIE_STRIPE_MIN_BYTES", "262144",                                                    \
    "TCP messages at least this large are split across the sockets of a peer")                                   \
  X(connectRetries, Int, "COLLIE_CONNECT_RETRIES", "50",                                                         \
    "times a refused connection is retried during init (exponential backoff, capped by COLLIE_TIMEOUT)")         \
  X(sliceBytes, Int, "COLLIE_SLICE_BYTES", "0", "pipeline slice size in bytes; 0 lets the tuner choose")         \
  X(slicesInFlight, Int, "COLLIE_SLICES_IN_FLIGHT", "0",                                                         \
    "receive slices posted ahead per step; 0 lets the tuner choose")                                             \
  X(spinUs, Int, "COLLIE_SPIN_US", "20", "microseconds a waiting rank polls before it sleeps")                   \
  X(algo, Str, "COLLIE_ALGO", "", "force an algorithm (NCCL grammar: ring, ^tree, allreduce:ring;...)")          \
  X(tuneFile, Str, "COLLIE_TUNE_FILE", "",                                                                       \
    "file of measured link costs per transport and reduction cost: read at init if present, else written")       \
  X(tuneMeasure, Int, "COLLIE_TUNE_MEASURE", "1",                                                                \
    "1: measure alpha/beta (ping-pong) and gamma at init where no tuning file has them; 0: built-in costs")      \
  X(rootAddr, Str, "COLLIE_ROOT_ADDR", "",                                                                       \
    "host:port of the bootstrap root for env init without COLLIE_UNIQUE_ID (default MASTER_ADDR:MASTER_PORT+1)") \
  X(secret, Str, "COLLIE_SECRET", "",                                                                            \
    "shared secret for env init without COLLIE_UNIQUE_ID; ranks must agree (default: derived from the job)")     \
  X(shmDisable, Int, "COLLIE_SHM_DISABLE", "0",                                                                  \
    "1: never use the shared-memory transport (same-host peers then use tcp)")                                   \
  X(shmSlots, Int, "COLLIE_SHM_SLOTS", "8", "slots in the ring of each same-host peer pair and direction")       \
  X(shmSlotBytes, Int, "COLLIE_SHM_SLOT_BYTES", "65536", "payload bytes per shm ring slot (rounded up to 64)")   \
  X(shmSingleCopy, Int, "COLLIE_SHM_SINGLE_COPY", "1",                                                           \
    "large shm messages in one copy: 0 never, 1 between threads and where process_vm_readv beats 2 memcpy, 2 "   \
    "wherever process_vm_readv is allowed")                                                                      \
  X(shmSingleCopyMinBytes, Int, "COLLIE_SHM_SINGLE_COPY_MIN_BYTES", "65536",                                     \
    "shm messages at least this large take the single-copy path (when available)")                               \
  X(shmBacking, Str, "COLLIE_SHM_BACKING", "memfd",                                                              \
    "shm segments: memfd (anonymous, never in /dev/shm) or devshm (shm_open in /dev/shm, unlinked at once)")     \
  X(pinThreads, Int, "COLLIE_PIN_THREADS", "0",                                                                  \
    "1: bind the progress thread to the CPUs of the NUMA node the communicator was created on")                  \
  X(cudaPlugin, Str, "COLLIE_CUDA_PLUGIN", "",                                                                   \
    "path of libcollie_cuda.so (default: next to libcollie, then the loader's search path)")

#define COLLIE_PARAM_DECLARE_Int(name) int64_t name();
#define COLLIE_PARAM_DECLARE_Str(name) const std::string& name();
#define COLLIE_PARAM_DECLARE(name, type, env, def, desc) COLLIE_PARAM_DECLARE_##type(name)
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

}  // namespace collie::base::params
