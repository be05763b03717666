/*
 * collie.h: the stable C API of collie, for embedding.
 *
 * NCCL-shaped: opaque communicator handles, result codes, (send, recv, count, type, op, comm, stream)
 * argument order. Enum values and result codes equal NCCL's (nccl.h 2.28) so that a compatibility
 * layer is a thin mapping; collieTimeout is collie's own addition after NCCL's last code.
 *
 * Host-memory semantics: a plain call blocks until the result is in recvbuff. The *Async forms return
 * a request to wait on (collieWait / collieTest / collieRequestFree). Calls between collieGroupStart and
 * collieGroupEnd are issued together and complete at collieGroupEnd. As in NCCL, a call that fails inside a group
 * fails the group: collieGroupEnd then issues none of its calls and returns that error.
 *
 * No exception crosses this boundary; every entry point returns a collieResult_t, and the message of
 * the last failure is available from collieGetLastError(comm) (or collieGetLastError(NULL) for calls
 * without a communicator, per thread).
 */
#ifndef COLLIE_COLLIE_H_
#define COLLIE_COLLIE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define COLLIE_EXPORT
#else
#define COLLIE_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define COLLIE_MAJOR 0
#define COLLIE_MINOR 1
#define COLLIE_PATCH 0
#define COLLIE_VERSION_CODE(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define COLLIE_VERSION COLLIE_VERSION_CODE(COLLIE_MAJOR, COLLIE_MINOR, COLLIE_PATCH)

/** Result codes; values 0..7 equal ncclResult_t. */
typedef enum {
  collieSuccess = 0,
  collieUnhandledCudaError = 1,
  collieSystemError = 2,
  collieInternalError = 3,
  collieInvalidArgument = 4,
  collieInvalidUsage = 5,
  collieRemoteError = 6,
  collieInProgress = 7,
  collieTimeout = 8,
  collieNumResults = 9
} collieResult_t;

/** Reduction operations; values equal ncclRedOp_t. */
typedef enum {
  collieSum = 0,
  collieProd = 1,
  collieMax = 2,
  collieMin = 3,
  collieAvg = 4,
  collieNumOps = 5, /**< values from here: ops made per communicator by collieRedOpCreatePreMulSum */
  collieMaxRedOp = 0x7fffffff
} collieRedOp_t;

/** Where a PreMulSum's factor lives; values equal ncclScalarResidence_t. */
typedef enum {
  collieScalarDevice = 0,       /**< a pointer, read by every call that uses the op, when the call is made (collie:
                                     host memory only; a pointer into GPU memory is refused) */
  collieScalarHostImmediate = 1 /**< the value, read once when the op is made */
} collieScalarResidence_t;

/** Element types; values equal ncclDataType_t (fp8 types are not supported and are rejected). */
typedef enum {
  collieInt8 = 0,
  collieChar = 0,
  collieUint8 = 1,
  collieInt32 = 2,
  collieInt = 2,
  collieUint32 = 3,
  collieInt64 = 4,
  collieUint64 = 5,
  collieFloat16 = 6,
  collieHalf = 6,
  collieFloat32 = 7,
  collieFloat = 7,
  collieFloat64 = 8,
  collieDouble = 8,
  collieBfloat16 = 9,
  collieNumTypes = 10
} collieDataType_t;

/** Opaque communicator handle. */
typedef struct collieComm* collieComm_t;
/** Opaque request handle of an async call. */
typedef struct collieRequest* collieRequest_t;
/** A CUDA stream (cudaStream_t) for device buffers; pass NULL for host buffers. */
typedef void* collieStream_t;

#define COLLIE_UNIQUE_ID_BYTES 128
/** Identifies one communicator being created: the bootstrap root's address plus a random secret. */
typedef struct {
  char internal[COLLIE_UNIQUE_ID_BYTES];
} collieUniqueId;

/** Pass as color to collieCommSplit to get no communicator back (NULL). */
#define COLLIE_SPLIT_NOCOLOR (-1)
#define COLLIE_CONFIG_UNDEF_INT (-2147483647 - 1)
#define COLLIE_CONFIG_MAGIC 0xc011e5u

/** Communicator configuration; initialise with COLLIE_CONFIG_INITIALIZER. */
typedef struct collieConfig_v1 {
  size_t size;          /**< sizeof(collieConfig_t); set by the initializer */
  unsigned int magic;   /**< COLLIE_CONFIG_MAGIC; set by the initializer */
  unsigned int version; /**< COLLIE_VERSION; set by the initializer */
  int blocking;         /**< 1 (default): init blocks; 0: init returns collieInProgress, poll collieCommGetAsyncError */
  int timeoutMs;        /**< how long a call waits on a silent peer before failing; default COLLIE_TIMEOUT */
  const char* commName; /**< a name used in logs and errors; default none */
  int splitShare;       /**< collieCommSplit: 1 shares the parent's connections (Options::shareConnections). Unset in a
                             split's config: what the parent's own config set (at its init or split), else 0, as NCCL
                             takes it from the parent's config */
} collieConfig_t;

#define COLLIE_CONFIG_INITIALIZER                                                                                  \
  {                                                                                                                \
    sizeof(collieConfig_t), COLLIE_CONFIG_MAGIC, COLLIE_VERSION, COLLIE_CONFIG_UNDEF_INT, COLLIE_CONFIG_UNDEF_INT, \
        NULL, COLLIE_CONFIG_UNDEF_INT                                                                              \
  }

/** Writes COLLIE_VERSION into *version. */
COLLIE_EXPORT collieResult_t collieGetVersion(int* version);
/** Creates a unique id and starts the bootstrap root in this process; share the id with every rank. */
COLLIE_EXPORT collieResult_t collieGetUniqueId(collieUniqueId* uniqueId);
/** Writes the id as a 256-character hex string plus NUL into buf (at least 257 bytes). */
COLLIE_EXPORT collieResult_t collieUniqueIdToString(const collieUniqueId* uniqueId, char* buf, size_t bufSize);
/** Parses a string written by collieUniqueIdToString. */
COLLIE_EXPORT collieResult_t collieUniqueIdFromString(const char* str, collieUniqueId* uniqueId);

/** Creates the communicator of rank `rank` among nranks; collective over all ranks. */
COLLIE_EXPORT collieResult_t collieCommInitRank(collieComm_t* comm, int nranks, collieUniqueId commId, int rank);
COLLIE_EXPORT collieResult_t collieCommInitRankConfig(collieComm_t* comm, int nranks, collieUniqueId commId, int rank,
                                                      collieConfig_t* config);
/** Creates ndev communicators in this process (one thread per rank inside); comms must hold ndev handles.
 * devlist is ignored for host communicators and may be NULL. */
COLLIE_EXPORT collieResult_t collieCommInitAll(collieComm_t* comms, int ndev, const int* devlist);
/** Creates the communicator from a launcher's environment. Rank and size come from collierun (COLLIE_RANK,
 * COLLIE_NRANKS), torchrun (RANK, WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_RANK/SIZE) or Slurm (SLURM_PROCID,
 * SLURM_NTASKS); the meeting point from COLLIE_UNIQUE_ID (a whole id), else COLLIE_ROOT_ADDR (collierun sets
 * it, with COLLIE_SECRET), else MASTER_ADDR:MASTER_PORT+1. Rank 0 hosts the bootstrap root. config may be NULL. */
COLLIE_EXPORT collieResult_t collieCommInitFromEnv(collieComm_t* comm, collieConfig_t* config);
/** Waits for outstanding work, then frees the communicator. */
COLLIE_EXPORT collieResult_t collieCommDestroy(collieComm_t comm);
/** Stops all work at once (blocked calls on other threads return an error) and frees the communicator. A
 * non-blocking init still running is stopped too (its waits end within about 100 ms); its peers then fail as they
 * would on a rank that died in init. */
COLLIE_EXPORT collieResult_t collieCommAbort(collieComm_t comm);
/** Stops all work at once, as collieCommAbort does, but keeps the communicator: blocked calls on other threads and
 * every later call fail (collieInvalidUsage, "aborted", or the failure it already had), collieCommGetAsyncError
 * reports it, collieCommShrink works on it, and collieCommDestroy frees it. Members of a family that shares
 * connections (splitShare) stop together. A non-blocking init still running is stopped and leaves no communicator
 * (its calls return the init's failure). */
COLLIE_EXPORT collieResult_t collieCommRevoke(collieComm_t comm);
/** Returns, in *asyncError, the error the communicator hit in the background, collieInProgress during a
 * non-blocking init, else collieSuccess. After a failure, collieGetLastError (comm's and this thread's) gives that
 * failure's message. */
COLLIE_EXPORT collieResult_t collieCommGetAsyncError(collieComm_t comm, collieResult_t* asyncError);
COLLIE_EXPORT collieResult_t collieCommCount(const collieComm_t comm, int* count);
COLLIE_EXPORT collieResult_t collieCommUserRank(const collieComm_t comm, int* rank);

/** One collective and algorithm in a communicator's statistics (collieCommGetStats). */
typedef struct {
  char collective[24];      /**< "AllReduce", "Broadcast", ..., "Send", "Recv" */
  char algorithm[24];       /**< "ring", "direct", "tree", "rhd", ... */
  unsigned long long calls; /**< the user's calls of this collective that ran this algorithm */
  unsigned long long bytes; /**< their bytes per rank, summed */
  double seconds;           /**< their time, summed; -1 when calls are not timed (COLLIE_STATS=1 times them) */
} collieCollStats_t;
/** comm's calls so far, aggregated per collective and algorithm: writes up to `capacity` rows into `rows` (NULL
    when capacity is 0) and the number of rows there are into *count; call again with more room when *count >
    capacity. `rowSize` is sizeof(collieCollStats_t) as the caller was compiled: rows are rowSize bytes apart, a
    later header's fields past this one's are zeroed, and a size below this first version's is refused
    (collieInvalidArgument). COLLIE_STATS=1 prints the same as a table when the communicator is destroyed. */
COLLIE_EXPORT collieResult_t collieCommGetStats(const collieComm_t comm, collieCollStats_t* rows, size_t rowSize,
                                                int capacity, int* count);
/** Splits comm by color (COLLIE_SPLIT_NOCOLOR: *newcomm = NULL), ordering new ranks by key then old rank. */
COLLIE_EXPORT collieResult_t collieCommSplit(collieComm_t comm, int color, int key, collieComm_t* newcomm,
                                             collieConfig_t* config);
/** Makes *newcomm, the communicator of comm's ranks not in excludeRanks (excludeCount of them; NULL when 0):
 * new ranks 0..n-1 in the order of the old ones. For going on after a rank died: it works on a failed comm and
 * uses neither comm's connections nor its bootstrap root (which may have died). Every surviving rank calls it
 * with the same list (in any order); an excluded rank that calls it gets collieInvalidUsage. A survivor missing
 * or passing another list makes it fail (collieRemoteError or collieTimeout, within comm's timeout). comm is left
 * as it was: destroy it (collieCommAbort if it failed) when done. The new communicator has comm's timeout. */
COLLIE_EXPORT collieResult_t collieCommShrink(collieComm_t comm, const int* excludeRanks, int excludeCount,
                                              collieComm_t* newcomm);
/** collieCommShrink with a config (NULL: as collieCommShrink): its commName names the new communicator and its
 * timeoutMs replaces comm's. The call always blocks (blocking is not used), and splitShare must be unset or 0: a
 * shrunk communicator shares no connection with comm (whose peers may be dead). */
COLLIE_EXPORT collieResult_t collieCommShrinkConfig(collieComm_t comm, const int* excludeRanks, int excludeCount,
                                                    collieComm_t* newcomm, collieConfig_t* config);

/** Makes in *op a reduction of comm, NCCL's ncclRedOpCreatePreMulSum: every rank's input is multiplied by that rank's
 * own factor, one element of `datatype` at `scalar` (read now for collieScalarHostImmediate, at each call for
 * collieScalarDevice), and the products summed. A call using *op must have that datatype and run on comm;
 * collieRedOpDestroy(*op, comm) ends it (the calls made already keep their factor). */
COLLIE_EXPORT collieResult_t collieRedOpCreatePreMulSum(collieRedOp_t* op, void* scalar, collieDataType_t datatype,
                                                        collieScalarResidence_t residence, collieComm_t comm);
COLLIE_EXPORT collieResult_t collieRedOpDestroy(collieRedOp_t op, collieComm_t comm);

COLLIE_EXPORT const char* collieGetErrorString(collieResult_t result);
/** The message of the last failure on comm, or of this thread's last failure when comm is NULL. The string is
 * this thread's own copy: another thread's failure does not change it; it stays valid until this thread's next
 * collie call. */
COLLIE_EXPORT const char* collieGetLastError(collieComm_t comm);

COLLIE_EXPORT collieResult_t collieAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                             collieDataType_t datatype, collieRedOp_t op, collieComm_t comm,
                                             collieStream_t stream);
COLLIE_EXPORT collieResult_t collieBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                             collieDataType_t datatype, int root, collieComm_t comm,
                                             collieStream_t stream);
COLLIE_EXPORT collieResult_t collieReduce(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t datatype,
                                          collieRedOp_t op, int root, collieComm_t comm, collieStream_t stream);
/** recvbuff holds nranks * sendcount elements; in place when sendbuff == recvbuff + rank * sendcount. */
COLLIE_EXPORT collieResult_t collieAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                             collieDataType_t datatype, collieComm_t comm, collieStream_t stream);
/** sendbuff holds nranks * recvcount elements; in place when recvbuff == sendbuff + rank * recvcount. */
COLLIE_EXPORT collieResult_t collieReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                 collieDataType_t datatype, collieRedOp_t op, collieComm_t comm,
                                                 collieStream_t stream);
/** Block p of sendbuff (count elements) goes to rank p; block p of recvbuff comes from rank p. Out of place. */
COLLIE_EXPORT collieResult_t collieAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                            collieDataType_t datatype, collieComm_t comm, collieStream_t stream);
COLLIE_EXPORT collieResult_t collieSend(const void* sendbuff, size_t count, collieDataType_t datatype, int peer,
                                        collieComm_t comm, collieStream_t stream);
/** peer = COLLIE_ANY_SOURCE: from whichever rank sends first (collieRecvAny tells which). */
COLLIE_EXPORT collieResult_t collieRecv(void* recvbuff, size_t count, collieDataType_t datatype, int peer,
                                        collieComm_t comm, collieStream_t stream);
#define COLLIE_ANY_SOURCE (-1)
/** Receives, into host memory, the first message sent to this rank by any other rank, and sets *source to that
 * rank. Messages from one sender are taken in the order it sent them; the sender's count and datatype must be
 * these. Blocking; not inside a group (collieInvalidUsage); over the tcp and shm transports (collieInvalidUsage
 * where a peer is linked by ucx). A peer that exits or dies is dropped: collieRemoteError once every other rank
 * has, collieTimeout (naming the ranks waited on) when none sends within the communicator's timeout. */
COLLIE_EXPORT collieResult_t collieRecvAny(void* recvbuff, size_t count, collieDataType_t datatype, int* source,
                                           collieComm_t comm);
/** Returns once every rank has entered the barrier. */
COLLIE_EXPORT collieResult_t collieBarrier(collieComm_t comm);

COLLIE_EXPORT collieResult_t collieGroupStart(void);
COLLIE_EXPORT collieResult_t collieGroupEnd(void);
/** Fails this thread's open group as a call failed inside it does: collieGroupEnd issues none of its calls and returns
 * `code` with `why` (collieGetLastError). For a caller that gives up building a group halfway (a check of its own
 * failed). The first failure is kept. Outside a group, or with collieSuccess / collieInProgress: collieInvalidUsage. */
COLLIE_EXPORT collieResult_t collieGroupFail(collieResult_t code, const char* why);

/* Async forms for host buffers: the call returns at once with a request; the buffers must stay untouched
 * until collieWait returns or collieTest reports done. Free every request with collieRequestFree. */
COLLIE_EXPORT collieResult_t collieAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                                  collieDataType_t datatype, collieRedOp_t op, collieComm_t comm,
                                                  collieRequest_t* request);
COLLIE_EXPORT collieResult_t collieBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count,
                                                  collieDataType_t datatype, int root, collieComm_t comm,
                                                  collieRequest_t* request);
COLLIE_EXPORT collieResult_t collieReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                               collieDataType_t datatype, collieRedOp_t op, int root, collieComm_t comm,
                                               collieRequest_t* request);
COLLIE_EXPORT collieResult_t collieAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                                  collieDataType_t datatype, collieComm_t comm,
                                                  collieRequest_t* request);
COLLIE_EXPORT collieResult_t collieReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                      collieDataType_t datatype, collieRedOp_t op, collieComm_t comm,
                                                      collieRequest_t* request);
COLLIE_EXPORT collieResult_t collieAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                                                 collieDataType_t datatype, collieComm_t comm,
                                                 collieRequest_t* request);
/** Blocks until the request is done; returns its result. */
COLLIE_EXPORT collieResult_t collieWait(collieRequest_t request);
/** Sets *done to 1 when the request is done (then returns its result), else 0 and collieSuccess. */
COLLIE_EXPORT collieResult_t collieTest(collieRequest_t request, int* done);
/** Frees a request; a request not yet done is waited for first. */
COLLIE_EXPORT collieResult_t collieRequestFree(collieRequest_t request);

#ifdef __cplusplus
}
#endif

#endif  // COLLIE_COLLIE_H_
