// An NCCL program, run on collie: compiled against the CUDA toolkit's real nccl.h only and linked only with
// libnccl.so.2 (collie's NCCL layer, src/capi/nccl/), never with libcollie directly (libnccl.so.2 brings it in).
//
//   collierun -n N nccl_abi_test ID_PATH
//
// How the ranks meet: as an NCCL program does, by sharing an ncclUniqueId that rank 0 creates. Rank and size come
// from collierun's COLLIE_RANK / COLLIE_NRANKS (1 rank when they are unset). Rank 0 writes the id's 128 bytes to
// ID_PATH.<ppid> (through a temporary file and rename, so a reader never sees half of it); the other ranks poll
// for that file. <ppid> is the launcher's pid, shared by all ranks of one job and different for the next job, so
// a file left over from an earlier run is never read. Rank 0 removes the file once the communicator exists.
//
// Every call works on host buffers with a NULL stream, and every element of every result is checked exactly:
// AllReduce (every type, every op including avg; PreMulSum with each rank's own factor), Broadcast, Bcast, Reduce,
// AllGather, ReduceScatter, AlltoAll, Gather, Scatter and a Send/Recv ring inside ncclGroupStart/End, in place and out
// of place, with counts 0, 1, odd and large. The values are small integers, so every sum and product is exact in every
// type, and an average is the sum divided once (truncating for integers, one rounding for floating point) as NCCL and
// collie both do. Then: ncclCommSplit (with NCCL_SPLIT_NOCOLOR; splitShare decided by the parent's config, as NCCL
// does), ncclCommShrink (of a healthy communicator), ncclCommCount/UserRank, non-blocking init and
// ncclCommGetAsyncError, inits and splits inside a group driven by one thread (and aborted or destroyed before its
// end), ncclCommInitAll, ncclCommInitRankScalable, config checking, registration, ncclMemAlloc,
// ncclCommFinalize/Abort/Destroy, and the errors: a bad datatype, an fp8 datatype, a custom op never made, a peer
// outside [0, nranks) (-1 is no "any source"), Gather and Scatter blocks past the end of the address space (refused
// before any is sent), an unsupported function (ncclGetLastError non-empty each time), ncclGetErrorString and
// ncclGetVersion. Exits 0 when every check passed, 1 otherwise, naming each failed check.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int gRank = 0, gSize = 1;
long gChecks = 0, gFailures = 0;

#define CHECK(cond, ...)                                                                            \
  do {                                                                                              \
    ++gChecks;                                                                                      \
    if (!(cond)) {                                                                                  \
      ++gFailures;                                                                                  \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", gRank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                            \
      std::fputc('\n', stderr);                                                                     \
    }                                                                                               \
  } while (0)

// A call that must succeed; the test cannot go on (its peers would wait) if it does not.
#define NCCL_OK(call)                                                                                    \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    ++gChecks;                                                                                           \
    if (r_ != ncclSuccess) {                                                                             \
      std::fprintf(stderr, "rank %d: %s:%d: %s failed: %d (%s): %s\n", gRank, __FILE__, __LINE__, #call, \
                   static_cast<int>(r_), ncclGetErrorString(r_), ncclGetLastError(nullptr));             \
      std::exit(1);                                                                                      \
    }                                                                                                    \
  } while (0)

// ---- Element types ---------------------------------------------------------------------------------------------
struct Type {
  ncclDataType_t t;
  const char* name;
  size_t size;
  bool isSigned;  // can hold negative values
};

const Type kTypes[] = {
    {ncclInt8, "int8", 1, true},         {ncclUint8, "uint8", 1, false},    {ncclInt32, "int32", 4, true},
    {ncclUint32, "uint32", 4, false},    {ncclInt64, "int64", 8, true},     {ncclUint64, "uint64", 8, false},
    {ncclFloat16, "float16", 2, true},   {ncclFloat32, "float32", 4, true}, {ncclFloat64, "float64", 8, true},
    {ncclBfloat16, "bfloat16", 2, true},
};

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// float -> IEEE half, round to nearest even; zero and normal halves only (all the values used here).
uint16_t toHalf(float f) {
  uint32_t x = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  if ((x & 0x7fffffffu) == 0) return sign;
  int exp = static_cast<int>((x >> 23) & 0xffu) - 127 + 15;
  if (exp < 1 || exp > 30) {
    std::fprintf(stderr, "toHalf(%g): outside the normal half range used by this test\n", static_cast<double>(f));
    std::abort();
  }
  uint32_t mant = x & 0x7fffffu;
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// float -> bfloat16, round to nearest even (no NaN here).
uint16_t toBf16(float f) {
  uint32_t u = floatBits(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Stores v (exactly representable in the type, or a float quotient for fp16/bf16/fp32) as element i of buf.
void store(const Type& ty, void* buf, size_t i, double v) {
  char* p = static_cast<char*>(buf) + i * ty.size;
  switch (ty.t) {
    case ncclInt8: {
      int8_t x = static_cast<int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case ncclUint8: {
      uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case ncclInt32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclUint32: {
      uint32_t x = static_cast<uint32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclInt64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case ncclUint64: {
      uint64_t x = static_cast<uint64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case ncclFloat16: {
      uint16_t x = toHalf(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case ncclFloat32: {
      float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclFloat64:
      std::memcpy(p, &v, 8);
      break;
    case ncclBfloat16: {
      uint16_t x = toBf16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    default:
      std::abort();
  }
}

bool isFloat(const Type& ty) {
  return ty.t == ncclFloat16 || ty.t == ncclFloat32 || ty.t == ncclFloat64 || ty.t == ncclBfloat16;
}

// value() depends on i only through i % kPeriod (storePeriodic relies on it).
constexpr size_t kPeriod = 1009;

// The value rank r contributes at element i for op: small integers, so every result is exact.
double value(const Type& ty, ncclRedOp_t op, int r, size_t i) {
  const long k = static_cast<long>(i % kPeriod);
  switch (op) {
    case ncclProd: {
      double v = ((k + r) % 3 == 0) ? 2 : 1;
      if (ty.isSigned && (k + 2 * r) % 5 == 0) v = -v;
      return v;
    }
    case ncclMax:
    case ncclMin:
      return static_cast<double>((k * 7 + r * 3) % 11 - (ty.isSigned ? 5 : 0));
    default:  // sum, avg, and the data of the collectives that move data unchanged
      return static_cast<double>((k * 7 + r * 5 + 1) % 11 - (ty.isSigned ? 5 : 0));
  }
}

// The reduction over all ranks of value(..., r, i).
double reduced(const Type& ty, ncclRedOp_t op, size_t i, int nranks) {
  double acc = value(ty, op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = value(ty, op, r, i);
    switch (op) {
      case ncclProd:
        acc *= v;
        break;
      case ncclMax:
        acc = v > acc ? v : acc;
        break;
      case ncclMin:
        acc = v < acc ? v : acc;
        break;
      default:
        acc += v;
    }
  }
  if (op == ncclAvg) {
    if (isFloat(ty)) {
      // One true division of the exact sum, in the type's arithmetic (fp16/bf16 through float).
      if (ty.t == ncclFloat64) return acc / nranks;
      return static_cast<double>(static_cast<float>(acc) / static_cast<float>(nranks));
    }
    return static_cast<double>(static_cast<long long>(acc) / nranks);  // truncating, as integer division in C
  }
  return acc;
}

const char* opName(ncclRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return kNames[static_cast<int>(op)];
}

using Buf = std::vector<unsigned char>;

Buf makeBuf(const Type& ty, size_t count) { return Buf(ty.size * count + 1); }  // +1: never empty

// Stores f(offset + i) as element i of buf for i < count, f being periodic (kPeriod): one period is converted,
// the rest copied (converting every element of the large counts was most of this test's time).
template <class F>
void storePeriodic(const Type& ty, void* buf, size_t count, size_t offset, F f) {
  Buf period(kPeriod * ty.size);
  for (size_t k = 0; k < kPeriod; ++k) store(ty, period.data(), k, f(k));
  char* out = static_cast<char*>(buf);
  for (size_t i = 0, k = offset % kPeriod; i < count; k = 0) {
    const size_t n = std::min(count - i, kPeriod - k);
    std::memcpy(out + i * ty.size, period.data() + k * ty.size, n * ty.size);
    i += n;
  }
}

// The data rank r contributes for element i, unchanged by the moving collectives: block b of rank r starts at
// element b * count, and each block differs.
void fill(const Type& ty, void* buf, size_t count, int r, size_t offset = 0) {
  storePeriodic(ty, buf, count, offset, [&](size_t i) { return value(ty, ncclSum, r, i); });
}

// Compares count elements of got with want; reports the first difference.
void expectEqual(const Type& ty, const void* got, const void* want, size_t count, const std::string& what) {
  ++gChecks;
  if (count == 0 || std::memcmp(got, want, count * ty.size) == 0) return;
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* g = static_cast<const unsigned char*>(got) + i * ty.size;
    const unsigned char* w = static_cast<const unsigned char*>(want) + i * ty.size;
    if (std::memcmp(g, w, ty.size) != 0) {
      ++gFailures;
      std::string gh, wh;
      char b[4];
      for (size_t j = ty.size; j-- > 0;) {
        std::snprintf(b, sizeof(b), "%02x", g[j]);
        gh += b;
        std::snprintf(b, sizeof(b), "%02x", w[j]);
        wh += b;
      }
      std::fprintf(stderr, "rank %d: %s: element %zu of %zu is 0x%s, expected 0x%s\n", gRank, what.c_str(), i, count,
                   gh.c_str(), wh.c_str());
      return;
    }
  }
}

std::string label(const char* coll, const Type& ty, size_t count, bool inPlace, const char* extra = "") {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s %s count=%zu %s%s%s", coll, ty.name, count, inPlace ? "in-place" : "out-of-place",
                *extra ? " " : "", extra);
  return buf;
}

// ---- The unique id, shared through a file ------------------------------------------------------------------------
std::string idFile(const std::string& prefix) { return prefix + "." + std::to_string(getppid()); }

ncclUniqueId shareId(const std::string& path) {
  ncclUniqueId id;
  if (gRank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f || std::fwrite(&id, sizeof(id), 1, f) != 1 || std::fclose(f) != 0 ||
        std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "rank 0: cannot write the unique id to %s: %s\n", path.c_str(), std::strerror(errno));
      std::exit(1);
    }
    return id;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f) {
      size_t got = std::fread(&id, sizeof(id), 1, f);
      std::fclose(f);
      if (got == 1) return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "rank %d: no unique id appeared at %s\n", gRank, path.c_str());
  std::exit(1);
}

// ---- Collectives ---------------------------------------------------------------------------------------------------
const size_t kCounts[] = {0, 1, 7, 1001, 40009, 262147};

// ncclRedOpCreatePreMulSum, as nccl-tests' "premulsum" uses it: rank r's factor is 1 + r % 2 (one element of the
// type), read once (ncclScalarHostImmediate) or at each call (ncclScalarDevice, here a host pointer changed between
// calls); AllReduce, Reduce and ReduceScatter with every type, then the op destroyed and refused; an fp8 factor and a
// built-in op's destruction refused.
void testPreMulSum(ncclComm_t comm) {
  auto sumOf = [](const Type& ty, size_t i, auto factorOf) {
    double acc = 0;
    for (int r = 0; r < gSize; ++r) acc += value(ty, ncclSum, r, i) * factorOf(r);
    return acc;
  };
  for (const Type& ty : kTypes) {
    Buf factor = makeBuf(ty, 1), live = makeBuf(ty, 1);
    store(ty, factor.data(), 0, 1 + gRank % 2);
    ncclRedOp_t immediate, device;
    NCCL_OK(ncclRedOpCreatePreMulSum(&immediate, factor.data(), ty.t, ncclScalarHostImmediate, comm));
    NCCL_OK(ncclRedOpCreatePreMulSum(&device, live.data(), ty.t, ncclScalarDevice, comm));
    CHECK(immediate != device && static_cast<int>(immediate) >= static_cast<int>(ncclNumOps), "%s: ops %d and %d",
          ty.name, static_cast<int>(immediate), static_cast<int>(device));
    store(ty, factor.data(), 0, 100);  // read when the op was made
    for (size_t count : {size_t{1}, size_t{1001}, size_t{40009}}) {
      Buf want = makeBuf(ty, count), send = makeBuf(ty, count), recv = makeBuf(ty, count);
      storePeriodic(ty, send.data(), count, 0, [&](size_t i) { return value(ty, ncclSum, gRank, i); });
      storePeriodic(ty, want.data(), count, 0, [&](size_t i) { return sumOf(ty, i, [](int r) { return 1 + r % 2; }); });
      NCCL_OK(ncclAllReduce(send.data(), recv.data(), count, ty.t, immediate, comm, nullptr));
      expectEqual(ty, recv.data(), want.data(), count, label("AllReduce", ty, count, false, "premulsum"));
      store(ty, live.data(), 0, gRank);  // the device-resident factor, read now
      storePeriodic(ty, want.data(), count, 0, [&](size_t i) { return sumOf(ty, i, [](int r) { return r; }); });
      Buf red = makeBuf(ty, count);
      NCCL_OK(ncclReduce(send.data(), red.data(), count, ty.t, device, gSize - 1, comm, nullptr));
      if (gRank == gSize - 1)
        expectEqual(ty, red.data(), want.data(), count, label("Reduce", ty, count, false, "premulsum"));
      const size_t n = static_cast<size_t>(gSize);
      Buf rsIn = makeBuf(ty, count * n), rsWant = makeBuf(ty, count);
      storePeriodic(ty, rsIn.data(), count * n, 0, [&](size_t i) { return value(ty, ncclSum, gRank, i); });
      storePeriodic(ty, rsWant.data(), count, count * static_cast<size_t>(gRank),
                    [&](size_t i) { return sumOf(ty, i, [](int r) { return r; }); });
      void* rsOut = rsIn.data() + count * static_cast<size_t>(gRank) * ty.size;  // in place
      NCCL_OK(ncclReduceScatter(rsIn.data(), rsOut, count, ty.t, device, comm, nullptr));
      expectEqual(ty, rsOut, rsWant.data(), count, label("ReduceScatter", ty, count, true, "premulsum"));
    }
    NCCL_OK(ncclRedOpDestroy(immediate, comm));
    NCCL_OK(ncclRedOpDestroy(device, comm));
    Buf one = makeBuf(ty, 1);
    const ncclResult_t r = ncclAllReduce(one.data(), one.data(), 1, ty.t, immediate, comm, nullptr);
    CHECK(r == ncclInvalidArgument, "%s: a destroyed op gave %d", ty.name, static_cast<int>(r));
  }
  ncclRedOp_t op;
  float scalar = 2.0f;
  ncclResult_t r = ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat8e4m3, ncclScalarHostImmediate, comm);
  CHECK(r == ncclInvalidArgument, "an fp8 PreMulSum gave %d", static_cast<int>(r));
  r = ncclRedOpDestroy(ncclSum, comm);
  CHECK(r == ncclInvalidArgument, "destroying ncclSum gave %d", static_cast<int>(r));
}

void testAllReduce(ncclComm_t comm) {
  for (const Type& ty : kTypes) {
    for (int o = 0; o < static_cast<int>(ncclNumOps); ++o) {
      ncclRedOp_t op = static_cast<ncclRedOp_t>(o);
      for (size_t count : kCounts) {
        Buf want = makeBuf(ty, count);
        storePeriodic(ty, want.data(), count, 0, [&](size_t i) { return reduced(ty, op, i, gSize); });
        for (bool inPlace : {false, true}) {
          Buf send = makeBuf(ty, count), recv = makeBuf(ty, count);
          storePeriodic(ty, send.data(), count, 0, [&](size_t i) { return value(ty, op, gRank, i); });
          void* out = inPlace ? send.data() : recv.data();
          NCCL_OK(ncclAllReduce(send.data(), out, count, ty.t, op, comm, nullptr));
          expectEqual(ty, out, want.data(), count, label("AllReduce", ty, count, inPlace, opName(op)));
        }
      }
    }
  }
}

void testReduce(ncclComm_t comm) {
  for (const Type& ty : kTypes) {
    for (int o = 0; o < static_cast<int>(ncclNumOps); ++o) {
      ncclRedOp_t op = static_cast<ncclRedOp_t>(o);
      for (size_t count : kCounts) {
        const int root = static_cast<int>((count + static_cast<size_t>(o)) % static_cast<size_t>(gSize));
        Buf want = makeBuf(ty, count);
        storePeriodic(ty, want.data(), count, 0, [&](size_t i) { return reduced(ty, op, i, gSize); });
        for (bool inPlace : {false, true}) {
          Buf send = makeBuf(ty, count), recv = makeBuf(ty, count);
          storePeriodic(ty, send.data(), count, 0, [&](size_t i) { return value(ty, op, gRank, i); });
          void* out = inPlace ? send.data() : recv.data();
          // recvbuff may be NULL away from the root (out of place).
          NCCL_OK(ncclReduce(send.data(), (inPlace || gRank == root) ? out : nullptr, count, ty.t, op, root, comm,
                             nullptr));
          if (gRank == root) expectEqual(ty, out, want.data(), count, label("Reduce", ty, count, inPlace, opName(op)));
        }
      }
    }
  }
}

void testBroadcast(ncclComm_t comm) {
  for (const Type& ty : kTypes) {
    for (size_t count : kCounts) {
      for (int root = 0; root < gSize; ++root) {
        Buf want = makeBuf(ty, count);
        fill(ty, want.data(), count, root);
        for (int mode = 0; mode < 3; ++mode) {  // 0: out of place, 1: in place, 2: ncclBcast
          Buf send = makeBuf(ty, count), recv = makeBuf(ty, count);
          if (gRank == root) fill(ty, send.data(), count, root);
          if (mode == 0) {
            NCCL_OK(ncclBroadcast(send.data(), recv.data(), count, ty.t, root, comm, nullptr));
          } else if (mode == 1) {
            NCCL_OK(ncclBroadcast(send.data(), send.data(), count, ty.t, root, comm, nullptr));
          } else {
            NCCL_OK(ncclBcast(send.data(), count, ty.t, root, comm, nullptr));
          }
          const char* name = mode == 2 ? "Bcast" : "Broadcast";
          char extra[32];
          std::snprintf(extra, sizeof(extra), "root=%d", root);
          expectEqual(ty, mode == 0 ? recv.data() : send.data(), want.data(), count,
                      label(name, ty, count, mode != 0, extra));
        }
      }
    }
  }
}

void testAllGather(ncclComm_t comm) {
  for (const Type& ty : kTypes) {
    for (size_t count : kCounts) {
      const size_t total = count * static_cast<size_t>(gSize);
      Buf want = makeBuf(ty, total);
      for (int r = 0; r < gSize; ++r) fill(ty, want.data() + static_cast<size_t>(r) * count * ty.size, count, r);
      for (bool inPlace : {false, true}) {
        Buf send = makeBuf(ty, count), recv = makeBuf(ty, total);
        unsigned char* mine = inPlace ? recv.data() + static_cast<size_t>(gRank) * count * ty.size : send.data();
        fill(ty, mine, count, gRank);
        NCCL_OK(ncclAllGather(mine, recv.data(), count, ty.t, comm, nullptr));
        expectEqual(ty, recv.data(), want.data(), total, label("AllGather", ty, count, inPlace));
      }
    }
  }
}

void testReduceScatter(ncclComm_t comm) {
  for (const Type& ty : kTypes) {
    for (int o = 0; o < static_cast<int>(ncclNumOps); ++o) {
      ncclRedOp_t op = static_cast<ncclRedOp_t>(o);
      for (size_t count : kCounts) {
        const size_t total = count * static_cast<size_t>(gSize);
        const size_t first = static_cast<size_t>(gRank) * count;  // this rank's block, as element indices
        Buf want = makeBuf(ty, count);
        storePeriodic(ty, want.data(), count, first, [&](size_t i) { return reduced(ty, op, i, gSize); });
        for (bool inPlace : {false, true}) {
          Buf send = makeBuf(ty, total), recv = makeBuf(ty, count);
          storePeriodic(ty, send.data(), total, 0, [&](size_t i) { return value(ty, op, gRank, i); });
          void* out = inPlace ? send.data() + first * ty.size : recv.data();
          NCCL_OK(ncclReduceScatter(send.data(), out, count, ty.t, op, comm, nullptr));
          expectEqual(ty, out, want.data(), count, label("ReduceScatter", ty, count, inPlace, opName(op)));
        }
      }
    }
  }
}

// Block p of rank r's send buffer holds fill(..., r, offset = p * 100003): distinct per sender and per block.
constexpr size_t kBlockStride = 100003;

void testAlltoAll(ncclComm_t comm) {
  for (const Type& ty : kTypes) {
    for (size_t count : kCounts) {
      const size_t total = count * static_cast<size_t>(gSize);
      Buf send = makeBuf(ty, total), recv = makeBuf(ty, total), want = makeBuf(ty, total);
      for (int p = 0; p < gSize; ++p) {
        fill(ty, send.data() + static_cast<size_t>(p) * count * ty.size, count, gRank,
             static_cast<size_t>(p) * kBlockStride);
        // Block p of what this rank receives: what rank p sent to us.
        fill(ty, want.data() + static_cast<size_t>(p) * count * ty.size, count, p,
             static_cast<size_t>(gRank) * kBlockStride);
      }
      NCCL_OK(ncclAlltoAll(send.data(), recv.data(), count, ty.t, comm, nullptr));
      expectEqual(ty, recv.data(), want.data(), total, label("AlltoAll", ty, count, false));
    }
  }
}

void testGatherScatter(ncclComm_t comm) {
  for (const Type& ty : kTypes) {
    for (size_t count : kCounts) {
      const size_t total = count * static_cast<size_t>(gSize);
      const size_t bytes = count * ty.size;
      for (int root = 0; root < gSize; ++root) {
        char extra[32];
        std::snprintf(extra, sizeof(extra), "root=%d", root);
        for (bool inPlace : {false, true}) {
          // Gather: block r of the root's recvbuff is rank r's data.
          Buf send = makeBuf(ty, count), recv = makeBuf(ty, total), want = makeBuf(ty, total);
          for (int r = 0; r < gSize; ++r) fill(ty, want.data() + static_cast<size_t>(r) * bytes, count, r);
          unsigned char* mine =
              (inPlace && gRank == root) ? recv.data() + static_cast<size_t>(root) * bytes : send.data();
          fill(ty, mine, count, gRank);
          NCCL_OK(ncclGather(mine, recv.data(), count, ty.t, root, comm, nullptr));
          if (gRank == root)
            expectEqual(ty, recv.data(), want.data(), total, label("Gather", ty, count, inPlace, extra));

          // Scatter: rank r receives block r of the root's sendbuff.
          Buf ssend = makeBuf(ty, total), srecv = makeBuf(ty, count), swant = makeBuf(ty, count);
          if (gRank == root) {
            for (int r = 0; r < gSize; ++r)
              fill(ty, ssend.data() + static_cast<size_t>(r) * bytes, count, root,
                   static_cast<size_t>(r) * kBlockStride);
          }
          fill(ty, swant.data(), count, root, static_cast<size_t>(gRank) * kBlockStride);
          unsigned char* out =
              (inPlace && gRank == root) ? ssend.data() + static_cast<size_t>(root) * bytes : srecv.data();
          NCCL_OK(ncclScatter(ssend.data(), out, count, ty.t, root, comm, nullptr));
          expectEqual(ty, out, swant.data(), count, label("Scatter", ty, count, inPlace, extra));
        }
      }
    }
  }
}

// A ring: send to rank+1, receive from rank-1, both in one group (either alone could wait for ever); plus an
// exchange with itself and, in the same group, the reverse ring with a different count.
void testSendRecv(ncclComm_t comm) {
  const int next = (gRank + 1) % gSize, prev = (gRank + gSize - 1) % gSize;
  for (const Type& ty : kTypes) {
    for (size_t count : kCounts) {
      const size_t count2 = count / 2 + 3;
      Buf send = makeBuf(ty, count), recv = makeBuf(ty, count), want = makeBuf(ty, count);
      Buf self = makeBuf(ty, count), selfRecv = makeBuf(ty, count);
      Buf back = makeBuf(ty, count2), backRecv = makeBuf(ty, count2), backWant = makeBuf(ty, count2);
      fill(ty, send.data(), count, gRank);
      fill(ty, want.data(), count, prev);
      fill(ty, self.data(), count, gRank, 7);
      fill(ty, back.data(), count2, gRank, 3);
      fill(ty, backWant.data(), count2, next, 3);
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclSend(send.data(), count, ty.t, next, comm, nullptr));
      NCCL_OK(ncclRecv(recv.data(), count, ty.t, prev, comm, nullptr));
      NCCL_OK(ncclSend(self.data(), count, ty.t, gRank, comm, nullptr));
      NCCL_OK(ncclRecv(selfRecv.data(), count, ty.t, gRank, comm, nullptr));
      NCCL_OK(ncclSend(back.data(), count2, ty.t, prev, comm, nullptr));
      NCCL_OK(ncclRecv(backRecv.data(), count2, ty.t, next, comm, nullptr));
      NCCL_OK(ncclGroupEnd());
      expectEqual(ty, recv.data(), want.data(), count, label("SendRecv ring", ty, count, false));
      expectEqual(ty, selfRecv.data(), self.data(), count, label("SendRecv self", ty, count, false));
      expectEqual(ty, backRecv.data(), backWant.data(), count2, label("SendRecv reverse ring", ty, count2, false));
    }
  }
}

// One AllReduce (sum of int32 rank numbers) on comm, checked against `expected`.
void checkSum(ncclComm_t comm, int contribution, int expected, const char* what) {
  int32_t v[3] = {contribution, contribution, contribution};
  NCCL_OK(ncclAllReduce(v, v, 3, ncclInt32, ncclSum, comm, nullptr));
  CHECK(v[0] == expected && v[1] == expected && v[2] == expected, "%s: sum %d, expected %d", what, v[0], expected);
}

// ---- Communicators
// ---------------------------------------------------------------------------------------------------
void testSplit(ncclComm_t comm) {
  // color rank % 2, key reversing the order; with 3 or more ranks the last rank takes no part.
  const bool out = gSize >= 3 && gRank == gSize - 1;
  const int color = out ? NCCL_SPLIT_NOCOLOR : gRank % 2;
  ncclComm_t sub = nullptr;
  NCCL_OK(ncclCommSplit(comm, color, gSize - gRank, &sub, nullptr));
  if (out) {
    CHECK(sub == nullptr, "NCCL_SPLIT_NOCOLOR gave a communicator");
    return;
  }
  CHECK(sub != nullptr, "ncclCommSplit gave no communicator");
  if (!sub) return;
  std::vector<int> members;  // old ranks of this color, ordered by key (descending old rank)
  for (int r = gSize - 1; r >= 0; --r) {
    if (r % 2 == color && !(gSize >= 3 && r == gSize - 1)) members.push_back(r);
  }
  int count = -1, rank = -1;
  NCCL_OK(ncclCommCount(sub, &count));
  NCCL_OK(ncclCommUserRank(sub, &rank));
  int expectedRank = -1, sum = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == gRank) expectedRank = static_cast<int>(i);
    sum += members[i];
  }
  CHECK(count == static_cast<int>(members.size()), "split count %d, expected %zu", count, members.size());
  CHECK(rank == expectedRank, "split rank %d, expected %d", rank, expectedRank);
  checkSum(sub, gRank, sum, "AllReduce on the split communicator");
  // A split of the split, with a config (blocking, named), then destroyed; the split itself is aborted.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.commName = "nccl-abi-test-subsplit";
  ncclComm_t subsub = nullptr;
  NCCL_OK(ncclCommSplit(sub, 0, rank, &subsub, &config));
  checkSum(subsub, 1, count, "AllReduce on the split of the split");
  NCCL_OK(ncclCommDestroy(subsub));
  NCCL_OK(ncclCommAbort(sub));
}

// Descriptors this process has open, once their count holds still (three equal reads 20 ms apart, 5 s at most): a
// crossed dial leaves the lower rank's accept loop the turned-away hello of the other rank (a socket and, over shm,
// three descriptors), which it closes only after the pair is connected, so a count taken right after the call that
// connected the pair may read up to 4 high (tests/common/descriptors.hpp, which this program does not link).
int openDescriptors() {
  auto count = [] {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d)) ++n;
      closedir(d);
    }
    return n;
  };
  int last = count(), same = 1;
  for (int i = 0; i < 250 && same < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int now = count();
    same = now == last ? same + 1 : 1;
    last = now;
  }
  return last;
}

// splitShare as NCCL has it: a child shares its parent's connections when the parent's config says splitShare (a child
// split without a config inherits its parent's; one split with a config has that one's). A sharing child opens no
// descriptor; a child of a parent without splitShare makes connections of its own.
void testSplitShare(ncclComm_t comm) {
  const int sum = gSize * (gSize + 1) / 2;  // of rank + 1
  ncclConfig_t share = NCCL_CONFIG_INITIALIZER, noShare = NCCL_CONFIG_INITIALIZER;
  share.splitShare = 1;
  noShare.splitShare = 0;
  ncclComm_t p = nullptr, c = nullptr, d = nullptr, e = nullptr;
  NCCL_OK(ncclCommSplit(comm, 0, gRank, &p, &share));  // comm's config has no splitShare: p's connections are its own
  checkSum(p, gRank + 1, sum, "AllReduce on a split with splitShare");
  const int before = openDescriptors();
  NCCL_OK(ncclCommSplit(p, 0, gRank, &c, nullptr));   // p's config: shares p's connections
  NCCL_OK(ncclCommSplit(p, 0, gRank, &d, &noShare));  // shares too: the parent's config decides
  checkSum(c, gRank + 1, sum, "AllReduce on a child sharing its parent's connections");
  checkSum(d, gRank + 1, sum, "AllReduce on a child (splitShare 0) of a parent with splitShare");
  const int after = openDescriptors();
  CHECK(after == before, "two children sharing their parent's connections opened %d descriptor(s)", after - before);
  NCCL_OK(ncclCommSplit(d, 0, gRank, &e, nullptr));  // d's config has splitShare 0: e makes its own connections
  checkSum(e, gRank + 1, sum, "AllReduce on a child of a parent without splitShare");
  if (gSize >= 2)
    CHECK(openDescriptors() > after, "a child of a parent without splitShare opened no descriptor of its own");
  for (ncclComm_t x : {e, d, c, p}) NCCL_OK(ncclCommDestroy(x));
}

// The two splits the tests below make of one communicator, which differ in members at every size: everyone in
// reverse order (key gSize - rank), and the ranks of this rank's parity in order.
struct SplitPair {
  ncclComm_t reversed = nullptr, byParity = nullptr;
  static int reversedColor() { return 0; }
  static int reversedKey() { return gSize - gRank; }
  static int parityColor() { return gRank % 2; }
  static int parityKey() { return gRank; }
  // Each communicator's size, this rank's place in it and an AllReduce of the old ranks, checked.
  void check(const char* what) const {
    int count = -1, rank = -1;
    NCCL_OK(ncclCommCount(reversed, &count));
    NCCL_OK(ncclCommUserRank(reversed, &rank));
    CHECK(count == gSize && rank == gSize - 1 - gRank, "%s: the reversed split is rank %d of %d, expected %d of %d",
          what, rank, count, gSize - 1 - gRank, gSize);
    checkSum(reversed, gRank, gSize * (gSize - 1) / 2, what);
    int parity = 0, members = 0;
    for (int r = gRank % 2; r < gSize; r += 2) {
      parity += r;
      ++members;
    }
    NCCL_OK(ncclCommCount(byParity, &count));
    NCCL_OK(ncclCommUserRank(byParity, &rank));
    CHECK(count == members && rank == gRank / 2, "%s: the split by parity is rank %d of %d, expected %d of %d", what,
          rank, count, gRank / 2, members);
    checkSum(byParity, gRank, parity, what);
  }
  void destroy() {
    NCCL_OK(ncclCommDestroy(reversed));
    NCCL_OK(ncclCommDestroy(byParity));
  }
  // Five rounds of the reversed split of `ofReversed` and the split by parity of `ofParity` in one group, each pair
  // checked and destroyed.
  static void fiveRoundsInOneGroup(ncclComm_t ofReversed, ncclComm_t ofParity, const char* what) {
    for (int round = 0; round < 5; ++round) {
      SplitPair pair;
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclCommSplit(ofReversed, reversedColor(), reversedKey(), &pair.reversed, nullptr));
      NCCL_OK(ncclCommSplit(ofParity, parityColor(), parityKey(), &pair.byParity, nullptr));
      NCCL_OK(ncclGroupEnd());
      pair.check(what);
      pair.destroy();
    }
  }
};

// Two splits of one parent in one group (a row and a column communicator, say): started at the group's end, they
// must take the parent's entries each for its own split, on every rank (before 2026-11-30 they ran at once, and a
// rank could get a communicator of the other split's members, with no error).
void testTwoSplitsOfOneParentInAGroup(ncclComm_t comm) {
  SplitPair::fiveRoundsInOneGroup(comm, comm, "two splits of one parent in a group");
}

// Waits (60 s at most) until a non-blocking communicator is no longer in progress; returns its state.
ncclResult_t waitReady(ncclComm_t c) {
  ncclResult_t state = ncclInProgress;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    NCCL_OK(ncclCommGetAsyncError(c, &state));
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

// A non-blocking communicator of comm's ranks (a split with blocking = 0), once it is ready.
ncclComm_t nonBlockingCopy(ncclComm_t comm) {
  ncclConfig_t nonBlocking = NCCL_CONFIG_INITIALIZER;
  nonBlocking.blocking = 0;
  ncclComm_t nb = nullptr;
  const ncclResult_t r = ncclCommSplit(comm, 0, gRank, &nb, &nonBlocking);
  CHECK(r == ncclSuccess || r == ncclInProgress, "a non-blocking split returned %d", static_cast<int>(r));
  CHECK(waitReady(nb) == ncclSuccess, "the non-blocking communicator is not ready: %s", ncclGetLastError(nb));
  return nb;
}

// The splits of one family keep the order they were issued in on every rank: two non-blocking splits of one parent
// in two groups (the second split waits for the first at its call) with, in the second group, an AllGather on the
// parent of the split's own shape (5 int32 a rank), which comes after the split; a call on the parent right after
// them; and, in one group, a split of a communicator and one of the child that shares its connections (splitShare),
// whose all-gathers take turns on the same connections.
void testSplitsOfOneFamilyKeepTheirOrder(ncclComm_t comm) {
  ncclComm_t nb = nonBlockingCopy(comm);
  ncclResult_t r = ncclSuccess;
  for (int round = 0; round < 5; ++round) {
    SplitPair pair;
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclCommSplit(nb, SplitPair::reversedColor(), SplitPair::reversedKey(), &pair.reversed, nullptr));
    r = ncclGroupEnd();
    CHECK(r == ncclSuccess || r == ncclInProgress, "the first group's end returned %d", static_cast<int>(r));
    std::vector<int32_t> mine(5), gathered(5 * static_cast<size_t>(gSize), -1);
    for (int k = 0; k < 5; ++k) mine[static_cast<size_t>(k)] = 100 * gRank + k;
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclCommSplit(nb, SplitPair::parityColor(), SplitPair::parityKey(), &pair.byParity, nullptr));
    NCCL_OK(ncclAllGather(mine.data(), gathered.data(), 5, ncclInt32, nb, nullptr));
    r = ncclGroupEnd();
    CHECK(r == ncclSuccess || r == ncclInProgress, "the second group's end returned %d", static_cast<int>(r));
    for (int q = 0; q < gSize; ++q)
      for (int k = 0; k < 5; ++k)
        CHECK(gathered[static_cast<size_t>(5 * q + k)] == 100 * q + k,
              "AllGather on the parent grouped with a split of it: element %d of rank %d is %d", k, q,
              gathered[static_cast<size_t>(5 * q + k)]);
    checkSum(nb, gRank, gSize * (gSize - 1) / 2, "AllReduce on the parent of two non-blocking splits");
    CHECK(waitReady(pair.reversed) == ncclSuccess && waitReady(pair.byParity) == ncclSuccess,
          "a non-blocking split is not ready");
    pair.check("two non-blocking splits of one parent in two groups");
    pair.destroy();
  }
  NCCL_OK(ncclCommDestroy(nb));

  ncclConfig_t share = NCCL_CONFIG_INITIALIZER;
  share.splitShare = 1;
  ncclComm_t root = nullptr, child = nullptr;
  NCCL_OK(ncclCommSplit(comm, 0, gRank, &root, &share));
  NCCL_OK(ncclCommSplit(root, 0, gRank, &child, nullptr));  // shares root's connections
  SplitPair::fiveRoundsInOneGroup(root, child, "splits of a family's root and of its sharing child in one group");
  NCCL_OK(ncclCommDestroy(child));
  NCCL_OK(ncclCommDestroy(root));
}

// ncclCommAbort of a parent whose non-blocking split still runs (the last rank never calls it) ends that split at
// once and returns: before, it waited for the split (collie's timeout, 10 minutes by default) or freed the parent
// under it. The last rank aborts its parent once the others have.
void testAbortOfAParentEndsItsRunningSplit(ncclComm_t comm) {
  if (gSize < 2) return;
  ncclComm_t nb = nonBlockingCopy(comm);
  ncclResult_t r = ncclSuccess;
  if (gRank == gSize - 1) {
    checkSum(comm, 0, 0 + 1 * (gSize - 1), "the others are aborting");  // a barrier: they come once they did
    NCCL_OK(ncclCommAbort(nb));
    return;
  }
  ncclComm_t child = nullptr;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclCommSplit(nb, 0, gRank, &child, nullptr));
  r = ncclGroupEnd();
  CHECK(r == ncclInProgress, "the group of a split the last rank never joins returned %d", static_cast<int>(r));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  NCCL_OK(ncclCommAbort(nb));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took < 5.0, "ncclCommAbort of a parent whose split still ran took %.1f s", took);
  const ncclResult_t state = waitReady(child);
  CHECK(state != ncclSuccess && state != ncclInProgress, "the split of an aborted parent ended in state %d",
        static_cast<int>(state));
  NCCL_OK(ncclCommAbort(child));
  checkSum(comm, 1, gSize - 1, "the others are aborting");
}

void testShrink(ncclComm_t comm) {
  // With 3 or more ranks the last rank is left out (alive, it does not call); the others pass the list.
  if (gSize < 3) {
    ncclComm_t same = nullptr;  // excluding nobody: a communicator of everyone on fresh connections
    NCCL_OK(ncclCommShrink(comm, nullptr, 0, &same, nullptr, NCCL_SHRINK_DEFAULT));
    if (same) checkSum(same, gRank, gSize * (gSize - 1) / 2, "AllReduce on a shrink excluding nobody");
    if (same) NCCL_OK(ncclCommDestroy(same));
    return;
  }
  if (gRank == gSize - 1) return;
  int exclude = gSize - 1;
  ncclComm_t small = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;  // its commName names the new communicator
  config.commName = "nccl-abi-test-shrunk";
  NCCL_OK(ncclCommShrink(comm, &exclude, 1, &small, &config, NCCL_SHRINK_ABORT));
  CHECK(small != nullptr, "ncclCommShrink gave no communicator");
  if (!small) return;
  int count = -1, rank = -1;
  NCCL_OK(ncclCommCount(small, &count));
  NCCL_OK(ncclCommUserRank(small, &rank));
  CHECK(count == gSize - 1 && rank == gRank, "shrunk: rank %d of %d, expected %d of %d", rank, count, gRank, gSize - 1);
  checkSum(small, gRank, (gSize - 1) * (gSize - 2) / 2, "AllReduce on the shrunk communicator");
  // Mismatched calls (rank 0 reduces 4 elements, the others 8) fail every rank, each naming the communicator by
  // the config's commName.
  int32_t buf[8] = {};
  const ncclResult_t r = ncclAllReduce(buf, buf, gRank == 0 ? 4 : 8, ncclInt32, ncclSum, small, nullptr);
  const char* e = ncclGetLastError(small);
  CHECK(r != ncclSuccess && e && std::strstr(e, "nccl-abi-test-shrunk rank "),
        "mismatched calls on the shrunk communicator gave %d and '%s': expected an error naming it by the config's "
        "commName",
        static_cast<int>(r), e ? e : "(null)");
  NCCL_OK(ncclCommAbort(small));
}

// Communicators of 2 ranks made and driven by this one thread: inits and splits inside a group, InitAll,
// InitRankScalable and a non-blocking config.
void testSingleThreadComms() {
  auto groupSum = [](ncclComm_t* comms, int n, const char* what) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    NCCL_OK(ncclGroupStart());
    for (int i = 0; i < n; ++i) {
      int rank = -1;
      NCCL_OK(ncclCommUserRank(comms[i], &rank));
      v[static_cast<size_t>(i)] = rank + 1;
      NCCL_OK(ncclAllReduce(&v[static_cast<size_t>(i)], &v[static_cast<size_t>(i)], 1, ncclInt32, ncclSum, comms[i],
                            nullptr));
    }
    NCCL_OK(ncclGroupEnd());
    for (int i = 0; i < n; ++i) CHECK(v[static_cast<size_t>(i)] == n * (n + 1) / 2, "%s: sum %d", what, v[0]);
  };

  // ncclCommInitRank inside a group: both ranks from this thread.
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t g[2] = {nullptr, nullptr};
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclCommInitRank(&g[0], 2, id, 0));
  NCCL_OK(ncclCommInitRank(&g[1], 2, id, 1));
  NCCL_OK(ncclGroupEnd());
  groupSum(g, 2, "grouped ncclCommInitRank");

  // ncclCommSplit inside a group (deferred to its end), reversing the order.
  ncclComm_t s[2] = {nullptr, nullptr};
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclCommSplit(g[0], 5, 1, &s[0], nullptr));
  NCCL_OK(ncclCommSplit(g[1], 5, 0, &s[1], nullptr));
  NCCL_OK(ncclGroupEnd());
  int r0 = -1, r1 = -1;
  NCCL_OK(ncclCommUserRank(s[0], &r0));
  NCCL_OK(ncclCommUserRank(s[1], &r1));
  CHECK(r0 == 1 && r1 == 0, "grouped split ranks %d %d, expected 1 0", r0, r1);
  groupSum(s, 2, "grouped ncclCommSplit");
  for (ncclComm_t c : {s[0], s[1], g[0], g[1]}) NCCL_OK(ncclCommDestroy(c));

  // ncclCommAbort and ncclCommDestroy inside the group that creates the communicator: the group's end must not
  // touch the freed handles. On a thread of its own (groups are per thread), so that a hang fails here.
  {
    ncclResult_t abortR = ncclInternalError, destroyR = ncclInternalError, endR = ncclInternalError;
    std::atomic<bool> done{false};
    std::thread t([&] {
      ncclUniqueId a, b;
      NCCL_OK(ncclGetUniqueId(&a));
      NCCL_OK(ncclGetUniqueId(&b));
      ncclComm_t x = nullptr, y = nullptr;
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclCommInitRank(&x, 1, a, 0));
      NCCL_OK(ncclCommInitRank(&y, 1, b, 0));
      abortR = ncclCommAbort(x);
      destroyR = ncclCommDestroy(y);
      endR = ncclGroupEnd();
      done = true;
    });
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!done) {
      std::fprintf(stderr, "rank %d: ncclGroupEnd after ncclCommAbort/Destroy in the group did not return in 60 s\n",
                   gRank);
      std::_Exit(1);
    }
    t.join();
    CHECK(abortR == ncclSuccess && destroyR == ncclSuccess && endR == ncclSuccess,
          "abort %d, destroy %d, group end %d inside the creating group", static_cast<int>(abortR),
          static_cast<int>(destroyR), static_cast<int>(endR));
  }

  // ncclCommInitAll, with a devlist: each communicator reports its device.
  ncclComm_t all[3] = {nullptr, nullptr, nullptr};
  const int devlist[3] = {0, 1, 0};
  NCCL_OK(ncclCommInitAll(all, 3, devlist));
  for (int i = 0; i < 3; ++i) {
    int dev = -1, rank = -1, count = -1;
    NCCL_OK(ncclCommCuDevice(all[i], &dev));
    NCCL_OK(ncclCommUserRank(all[i], &rank));
    NCCL_OK(ncclCommCount(all[i], &count));
    CHECK(dev == devlist[i] && rank == i && count == 3, "InitAll comm %d: device %d rank %d count %d", i, dev, rank,
          count);
  }
  groupSum(all, 3, "ncclCommInitAll");
  // Gather and Scatter whose root's 3 blocks run past the end of the address space, though blocks 0 and 1 alone are
  // buffers collie takes: refused before any block is queued (the group ran block 1 and failed the communicator),
  // nothing written, the communicator still works.
  {
    unsigned char small[64];
    std::memset(small, 0x5a, sizeof(small));
    const size_t count = SIZE_MAX / 3;  // int8, in place at root 0: 3 * count bytes wrap, 2 * count do not
    ncclResult_t r = ncclGather(small, small, count, ncclInt8, 0, all[0], nullptr);
    CHECK(r == ncclInvalidArgument, "ncclGather with blocks past the address space gave %d", static_cast<int>(r));
    CHECK(std::strstr(ncclGetLastError(all[0]), "recvbuff"), "ncclGather: '%s' names no recvbuff",
          ncclGetLastError(all[0]));
    r = ncclScatter(small, small, count, ncclInt8, 0, all[0], nullptr);
    CHECK(r == ncclInvalidArgument, "ncclScatter with blocks past the address space gave %d", static_cast<int>(r));
    CHECK(std::strstr(ncclGetLastError(all[0]), "sendbuff"), "ncclScatter: '%s' names no sendbuff",
          ncclGetLastError(all[0]));
    CHECK(static_cast<size_t>(std::count(small, small + sizeof(small), 0x5a)) == sizeof(small),
          "a refused Gather/Scatter wrote a byte");
    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(all[0], &async));
    CHECK(async == ncclSuccess, "the refused Gather/Scatter left async error %d", static_cast<int>(async));
    groupSum(all, 3, "ncclCommInitAll after a refused Gather and Scatter");
  }
  for (ncclComm_t c : all) NCCL_OK(ncclCommDestroy(c));

  // ncclCommInitRankScalable with one id, inside a group.
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t sc[2] = {nullptr, nullptr};
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclCommInitRankScalable(&sc[0], 2, 0, 1, &id, nullptr));
  NCCL_OK(ncclCommInitRankScalable(&sc[1], 2, 1, 1, &id, nullptr));
  NCCL_OK(ncclGroupEnd());
  groupSum(sc, 2, "ncclCommInitRankScalable");
  for (ncclComm_t c : sc) NCCL_OK(ncclCommDestroy(c));

  // Non-blocking init: ncclInProgress (or ncclSuccess), then polled with ncclCommGetAsyncError.
  NCCL_OK(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nccl-abi-test-nonblocking";
  ncclComm_t nb[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    ncclResult_t r = ncclCommInitRankConfig(&nb[i], 2, id, i, &config);
    CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking init returned %d: %s", static_cast<int>(r),
          ncclGetLastError(nullptr));
  }
  for (int i = 0; i < 2; ++i) {
    const ncclResult_t state = waitReady(nb[i]);
    CHECK(state == ncclSuccess, "non-blocking init %d ended in state %d", i, static_cast<int>(state));
  }
  groupSum(nb, 2, "non-blocking ncclCommInitRankConfig");
  // A split with a config that leaves `blocking` unset is blocking, whatever its parent (NCCL copies the parent's
  // config only into a split without one): the group's end returns ncclSuccess with the children ready.
  {
    ncclConfig_t childConfig = NCCL_CONFIG_INITIALIZER;
    ncclComm_t child[2] = {nullptr, nullptr};
    NCCL_OK(ncclGroupStart());
    for (int i = 0; i < 2; ++i) NCCL_OK(ncclCommSplit(nb[i], 0, i, &child[i], &childConfig));
    NCCL_OK(ncclGroupEnd());
    groupSum(child, 2, "blocking split of a non-blocking parent");
    for (ncclComm_t c : child) NCCL_OK(ncclCommDestroy(c));
  }
  for (ncclComm_t c : nb) NCCL_OK(ncclCommDestroy(c));

  // A group one of whose calls is refused starts none of its inits and splits: ncclGroupEnd returns the refusal at
  // once (it used to wait for the started ones until collie's timeout), the parents still work, and each handle the
  // group gave out reports the failure.
  {
    NCCL_OK(ncclCommInitAll(all, 2, nullptr));
    ncclComm_t child[2] = {nullptr, nullptr};
    const auto start = std::chrono::steady_clock::now();
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclCommSplit(all[0], 1, 0, &child[0], nullptr));
    ncclResult_t refused = ncclCommSplit(all[1], -5, 0, &child[1], nullptr);
    ncclResult_t end = ncclGroupEnd();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(refused == ncclInvalidArgument && end == ncclInvalidArgument && took < 5.0,
          "a group with a refused split: split %d, group end %d after %.1f s", static_cast<int>(refused),
          static_cast<int>(end), took);
    ncclResult_t state = ncclSuccess;
    NCCL_OK(ncclCommGetAsyncError(child[0], &state));
    CHECK(state == ncclInvalidArgument, "the split of a failed group is in state %d", static_cast<int>(state));
    int n = 0;
    CHECK(ncclCommCount(child[0], &n) == ncclInvalidArgument, "a split of a failed group answered ncclCommCount");
    NCCL_OK(ncclCommDestroy(child[0]));
    groupSum(all, 2, "parents of a failed group's splits");

    ncclUniqueId ids;
    NCCL_OK(ncclGetUniqueId(&ids));
    ncclComm_t inits[2] = {nullptr, nullptr};
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclCommInitRank(&inits[0], 2, ids, 0));
    refused = ncclCommInitRank(&inits[1], 2, ids, 7);
    end = ncclGroupEnd();
    CHECK(refused == ncclInvalidArgument && end == ncclInvalidArgument,
          "a group with a refused init: init %d, group end %d", static_cast<int>(refused), static_cast<int>(end));
    NCCL_OK(ncclCommGetAsyncError(inits[0], &state));
    CHECK(state == ncclInvalidArgument, "the init of a failed group is in state %d", static_cast<int>(state));
    NCCL_OK(ncclCommDestroy(inits[0]));
    for (int i = 0; i < 2; ++i) NCCL_OK(ncclCommDestroy(all[i]));
  }

  // As NCCL: ncclCommInitAll of no devices, ncclCommFinalize(NULL) succeed; a second finalize is an invalid argument.
  NCCL_OK(ncclCommInitAll(all, 0, nullptr));
  NCCL_OK(ncclCommFinalize(nullptr));
  NCCL_OK(ncclCommInitAll(all, 1, nullptr));
  NCCL_OK(ncclCommFinalize(all[0]));
  const ncclResult_t again = ncclCommFinalize(all[0]);
  CHECK(again == ncclInvalidArgument, "a second ncclCommFinalize gave %d", static_cast<int>(again));
  NCCL_OK(ncclCommDestroy(all[0]));

  // ncclCommAbort of a communicator whose non-blocking init still waits (rank 1 of 2 never comes) ends it at once,
  // not at collie's timeout (10 minutes by default).
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t alone = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&alone, 2, id, 0, &config);
  CHECK(r == ncclInProgress, "non-blocking init of 1 rank of 2 returned %d: %s", static_cast<int>(r),
        ncclGetLastError(nullptr));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Used before its init completed: ncclInvalidArgument at once, as NCCL's (it used to wait for the init, which
  // on this thread never ends).
  int count = 0;
  r = ncclCommCount(alone, &count);
  CHECK(r == ncclInvalidArgument, "ncclCommCount of a non-blocking communicator still in init gave %d",
        static_cast<int>(r));
  int32_t one = 1;
  r = ncclAllReduce(&one, &one, 1, ncclInt32, ncclSum, alone, nullptr);
  CHECK(r == ncclInvalidArgument, "ncclAllReduce on a non-blocking communicator still in init gave %d",
        static_cast<int>(r));
  const auto abortStart = std::chrono::steady_clock::now();
  NCCL_OK(ncclCommAbort(alone));
  const double abortTook = std::chrono::duration<double>(std::chrono::steady_clock::now() - abortStart).count();
  CHECK(abortTook < 5.0, "ncclCommAbort of a pending non-blocking init took %.1f s", abortTook);

  // The same with the init in a group, NCCL's usual way of starting non-blocking inits: ncclGroupEnd returns
  // ncclInProgress and the abort stops the init (it used to wait for the init's timeout there).
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclCommInitRankConfig(&alone, 2, id, 0, &config));
  r = ncclGroupEnd();
  CHECK(r == ncclInProgress, "ncclGroupEnd of a non-blocking init of 1 rank of 2 returned %d: %s", static_cast<int>(r),
        ncclGetLastError(nullptr));
  ncclResult_t state = ncclSuccess;
  NCCL_OK(ncclCommGetAsyncError(alone, &state));
  CHECK(state == ncclInProgress, "a non-blocking init in a group waiting for its peer is in state %d",
        static_cast<int>(state));
  const auto groupAbortStart = std::chrono::steady_clock::now();
  NCCL_OK(ncclCommAbort(alone));
  const double groupAbortTook =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - groupAbortStart).count();
  CHECK(groupAbortTook < 5.0, "ncclCommAbort of a pending non-blocking init made in a group took %.1f s",
        groupAbortTook);
}

// ---- API facts and errors ------------------------------------------------------------------------------------------
void testErrors(ncclComm_t comm) {
  // Version: the nccl.h this program was built with.
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  CHECK(version == NCCL_VERSION_CODE, "ncclGetVersion gave %d, expected %d", version, NCCL_VERSION_CODE);
  CHECK(version >= NCCL_VERSION(2, 28, 0), "ncclGetVersion gave %d", version);

  // Every result code has a string; an unknown one too.
  for (int r = 0; r < static_cast<int>(ncclNumResults); ++r) {
    const char* s = ncclGetErrorString(static_cast<ncclResult_t>(r));
    CHECK(s && *s, "ncclGetErrorString(%d) is empty", r);
  }
  CHECK(std::strlen(ncclGetErrorString(static_cast<ncclResult_t>(99))) > 0, "ncclGetErrorString(99) is empty");

  int32_t buf[4] = {1, 2, 3, 4};
  auto lastErrorHas = [&](const char* word, const char* what) {
    const char* e = ncclGetLastError(comm);
    CHECK(e && std::strstr(e, word), "%s: ncclGetLastError(comm) is '%s', expected it to mention '%s'", what,
          e ? e : "(null)", word);
    const char* t = ncclGetLastError(nullptr);
    CHECK(t && *t, "%s: ncclGetLastError(NULL) is empty", what);
  };
  ncclResult_t r = ncclAllReduce(buf, buf, 4, static_cast<ncclDataType_t>(42), ncclSum, comm, nullptr);
  CHECK(r == ncclInvalidArgument, "bad datatype gave %d", static_cast<int>(r));
  lastErrorHas("datatype", "bad datatype");
  r = ncclAllReduce(buf, buf, 4, ncclFloat8e4m3, ncclSum, comm, nullptr);
  CHECK(r == ncclInvalidArgument, "fp8 datatype gave %d", static_cast<int>(r));
  lastErrorHas("fp8", "fp8 datatype");
  r = ncclBroadcast(buf, buf, 4, ncclFloat8e5m2, 0, comm, nullptr);
  CHECK(r == ncclInvalidArgument, "fp8 broadcast gave %d", static_cast<int>(r));
  r = ncclAllReduce(buf, buf, 4, ncclInt32, static_cast<ncclRedOp_t>(ncclNumOps + 1000), comm, nullptr);
  CHECK(r == ncclInvalidArgument, "a custom op never made gave %d", static_cast<int>(r));
  lastErrorHas("not made by", "a custom op never made");
  r = ncclAllReduce(buf, buf, 4, ncclInt32, static_cast<ncclRedOp_t>(-3), comm, nullptr);
  CHECK(r == ncclInvalidArgument, "negative op gave %d", static_cast<int>(r));
  r = ncclBroadcast(buf, buf, 4, ncclInt32, gSize, comm, nullptr);  // root out of range: collie's own check
  CHECK(r == ncclInvalidArgument, "root out of range gave %d", static_cast<int>(r));
  lastErrorHas("root", "root out of range");
  // A peer is a rank: -1 is not "any source" (collie's COLLIE_ANY_SOURCE), and nothing is received.
  int32_t got[4] = {-7, -7, -7, -7};
  r = ncclRecv(got, 4, ncclInt32, -1, comm, nullptr);
  CHECK(r == ncclInvalidArgument, "ncclRecv from peer -1 gave %d", static_cast<int>(r));
  lastErrorHas("peer", "ncclRecv from peer -1");
  r = ncclRecv(got, 4, ncclInt32, gSize, comm, nullptr);
  CHECK(r == ncclInvalidArgument, "ncclRecv from peer nranks gave %d", static_cast<int>(r));
  lastErrorHas("peer", "ncclRecv from peer nranks");
  r = ncclSend(buf, 4, ncclInt32, -1, comm, nullptr);
  CHECK(r == ncclInvalidArgument, "ncclSend to peer -1 gave %d", static_cast<int>(r));
  lastErrorHas("peer", "ncclSend to peer -1");
  // A call refused inside a group fails the group, as in NCCL: ncclGroupEnd issues none of it (the good send queued
  // first included: issued, it would reach the next rank ahead of the calls that follow) and returns the error; the
  // refusal by this layer's own checks (the peer, the datatype) and by collie's alike.
  const int next = (gRank + 1) % gSize;
  for (int refusal = 0; refusal < 3; ++refusal) {
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(buf, 4, ncclInt32, next, comm, nullptr));
    if (refusal == 0) r = ncclRecv(got, 4, ncclInt32, -1, comm, nullptr);
    if (refusal == 1) r = ncclRecv(got, 4, static_cast<ncclDataType_t>(42), next, comm, nullptr);
    if (refusal == 2) r = ncclBroadcast(buf, got, 4, ncclInt32, gSize, comm, nullptr);  // collie refuses the root
    CHECK(r == ncclInvalidArgument, "refusal %d in a group gave %d", refusal, static_cast<int>(r));
    r = ncclGroupEnd();
    CHECK(r == ncclInvalidArgument, "ncclGroupEnd of a group with refusal %d gave %d", refusal, static_cast<int>(r));
    const char* e = ncclGetLastError(nullptr);
    CHECK(e && std::strstr(e, "none of the group"), "ncclGroupEnd after refusal %d: ncclGetLastError(NULL) is '%s'",
          refusal, e ? e : "(null)");
  }
  // An init that fails inside a group fails the group too, at the call (a rank out of range) or at the group's end
  // (an id that is no id, found by the deferred init): the group's send is not issued either way.
  for (int initCase = 0; initCase < 2; ++initCase) {
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(buf, 4, ncclInt32, next, comm, nullptr));
    ncclComm_t made = nullptr;
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (initCase == 0) {
      NCCL_OK(ncclGetUniqueId(&id));
      r = ncclCommInitRank(&made, 2, id, 5);
      CHECK(r == ncclInvalidArgument, "ncclCommInitRank of rank 5 of 2 in a group gave %d", static_cast<int>(r));
    } else {
      r = ncclCommInitRank(&made, 2, id, 0);
      CHECK(r == ncclSuccess, "ncclCommInitRank deferred in a group gave %d", static_cast<int>(r));
    }
    r = ncclGroupEnd();
    CHECK(r == ncclInvalidArgument, "ncclGroupEnd of a group whose init %s failed gave %d",
          initCase == 0 ? "call" : "deferred", static_cast<int>(r));
    if (made) ncclCommDestroy(made);
  }
  CHECK(got[0] == -7 && got[1] == -7 && got[2] == -7 && got[3] == -7, "a refused ncclRecv wrote recvbuff");
  // None of the refused groups' sends went out: a ring exchange of fresh values gets the fresh ones, not a stray.
  {
    const int prev = (gRank + gSize - 1) % gSize;
    int32_t fresh[4] = {100 + gRank, 0, 0, 0}, in[4] = {-1, -1, -1, -1};
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(fresh, 4, ncclInt32, next, comm, nullptr));
    NCCL_OK(ncclRecv(in, 4, ncclInt32, prev, comm, nullptr));
    NCCL_OK(ncclGroupEnd());
    CHECK(in[0] == 100 + prev, "after the refused groups rank %d received %d from rank %d, expected %d", gRank, in[0],
          prev, 100 + prev);
  }
  r = ncclAllReduce(buf, buf, 4, ncclInt32, ncclSum, nullptr, nullptr);
  CHECK(r == ncclInvalidArgument, "NULL comm gave %d", static_cast<int>(r));
  CHECK(*ncclGetLastError(nullptr), "NULL comm: no message");

  // Unsupported functions say so.
  r = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  CHECK(r == ncclInvalidUsage, "ncclCommRevoke gave %d", static_cast<int>(r));
  lastErrorHas("not supported", "ncclCommRevoke");
  ncclComm_t shrunk = reinterpret_cast<ncclComm_t>(&buf);
  int exclude = gRank;  // an excluded rank must not call it
  r = ncclCommShrink(comm, &exclude, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT);
  CHECK(r == ncclInvalidUsage && shrunk == nullptr, "ncclCommShrink excluding itself gave %d", static_cast<int>(r));
  lastErrorHas("exclude list", "ncclCommShrink excluding itself");
  r = ncclCommShrink(comm, &exclude, 1, &shrunk, nullptr, 7);
  CHECK(r == ncclInvalidArgument && shrunk == nullptr, "ncclCommShrink with bad flags gave %d", static_cast<int>(r));
  ncclWindow_t win;
  r = ncclCommWindowRegister(comm, buf, sizeof(buf), &win, NCCL_WIN_DEFAULT);
  CHECK(r == ncclInvalidUsage, "ncclCommWindowRegister gave %d", static_cast<int>(r));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupStart());
  int32_t simulated = 5;
  NCCL_OK(ncclAllReduce(&simulated, &simulated, 1, ncclInt32, ncclSum, comm, nullptr));
  r = ncclGroupSimulateEnd(&sim);
  CHECK(r == ncclInvalidUsage, "ncclGroupSimulateEnd gave %d", static_cast<int>(r));
  CHECK(simulated == 5, "ncclGroupSimulateEnd issued the group's AllReduce");
  r = ncclGroupEnd();  // as NCCL's, it ended the group
  CHECK(r == ncclInvalidUsage, "ncclGroupEnd without a group gave %d", static_cast<int>(r));

  // Configs are checked as NCCL checks them.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ncclComm_t bad = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  r = ncclCommInitRankConfig(&bad, 2, id, 0, &config);
  CHECK(r == ncclInvalidArgument && bad == nullptr, "uninitialised config gave %d", static_cast<int>(r));
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 7;
  r = ncclCommInitRankConfig(&bad, 2, id, 0, &config);
  CHECK(r == ncclInvalidArgument, "config->blocking=7 gave %d", static_cast<int>(r));
  r = ncclCommInitRank(&bad, 2, id, 2);
  CHECK(r == ncclInvalidArgument, "rank 2 of 2 gave %d", static_cast<int>(r));

  // The communicator still works after all of that.
  checkSum(comm, gRank, gSize * (gSize - 1) / 2, "AllReduce after the failed calls");
}

void testMisc(ncclComm_t comm) {
  int count = -1, rank = -1;
  NCCL_OK(ncclCommCount(comm, &count));
  NCCL_OK(ncclCommUserRank(comm, &rank));
  CHECK(count == gSize && rank == gRank, "count %d rank %d, expected %d %d", count, rank, gSize, gRank);

  // No CUDA in this process: a host-only communicator has no device (and says why).
  void* driver = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  int dev = -1;
  ncclResult_t r = ncclCommCuDevice(comm, &dev);
  if (driver) {
    CHECK(r == ncclSuccess && dev >= 0, "ncclCommCuDevice gave %d, device %d", static_cast<int>(r), dev);
    dlclose(driver);
  } else {
    CHECK(r == ncclInvalidUsage && *ncclGetLastError(comm), "ncclCommCuDevice without CUDA gave %d",
          static_cast<int>(r));
  }

  // Registration: a handle, given back once.
  int32_t data[16] = {};
  void* handle = nullptr;
  NCCL_OK(ncclCommRegister(comm, data, sizeof(data), &handle));
  CHECK(handle != nullptr, "ncclCommRegister gave no handle");
  NCCL_OK(ncclCommDeregister(comm, handle));
  r = ncclCommDeregister(comm, handle);
  CHECK(r == ncclInvalidArgument, "second ncclCommDeregister gave %d", static_cast<int>(r));
  void* leftover = nullptr;
  NCCL_OK(ncclCommRegister(comm, data, sizeof(data), &leftover));  // freed by ncclCommDestroy

  // ncclMemAlloc: host memory here (no CUDA), usable as a buffer.
  void* mem = nullptr;
  NCCL_OK(ncclMemAlloc(&mem, 3 * sizeof(int32_t)));
  CHECK(mem != nullptr, "ncclMemAlloc gave NULL");
  if (mem && !driver) {
    int32_t* v = static_cast<int32_t*>(mem);
    v[0] = v[1] = v[2] = gRank;
    NCCL_OK(ncclAllReduce(v, v, 3, ncclInt32, ncclMax, comm, nullptr));
    CHECK(v[0] == gSize - 1 && v[2] == gSize - 1, "AllReduce on ncclMemAlloc memory gave %d", v[0]);
  }
  NCCL_OK(ncclMemFree(mem));
  int local = 0;
  r = ncclMemFree(&local);
  CHECK(r != ncclSuccess, "ncclMemFree of a stack address succeeded");
  mem = &local;
  r = ncclMemAlloc(&mem, 0);  // as NCCL (cudaMalloc of 0 bytes): success, and no memory
  CHECK(r == ncclSuccess && mem == nullptr, "ncclMemAlloc of 0 bytes gave %d", static_cast<int>(r));
  NCCL_OK(ncclMemFree(mem));

  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "ncclCommGetAsyncError reports %d", static_cast<int>(async));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: collierun -n N %s ID_PATH\n", argv[0]);
    return 2;
  }
  if (const char* r = std::getenv("COLLIE_RANK")) gRank = std::atoi(r);
  if (const char* n = std::getenv("COLLIE_NRANKS")) gSize = std::atoi(n);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  const std::string path = idFile(argv[1]);
  ncclUniqueId id = shareId(path);
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, gSize, id, gRank));
  if (gRank == 0) std::remove(path.c_str());  // every rank has read it: they all joined

  auto timed = [](const char* name, auto&& f) {
    auto t0 = std::chrono::steady_clock::now();
    long before = gFailures;
    f();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (gRank == 0) std::printf("%-18s %s (%.0f ms)\n", name, gFailures == before ? "ok" : "FAILED", ms);
  };
  timed("AllReduce", [&] { testAllReduce(comm); });
  timed("Reduce", [&] { testReduce(comm); });
  timed("PreMulSum", [&] { testPreMulSum(comm); });
  timed("Broadcast/Bcast", [&] { testBroadcast(comm); });
  timed("AllGather", [&] { testAllGather(comm); });
  timed("ReduceScatter", [&] { testReduceScatter(comm); });
  timed("AlltoAll", [&] { testAlltoAll(comm); });
  timed("Gather/Scatter", [&] { testGatherScatter(comm); });
  timed("Send/Recv", [&] { testSendRecv(comm); });
  timed("CommSplit", [&] { testSplit(comm); });
  timed("splitShare", [&] { testSplitShare(comm); });
  timed("two splits in a group", [&] { testTwoSplitsOfOneParentInAGroup(comm); });
  timed("splits of a family in order", [&] { testSplitsOfOneFamilyKeepTheirOrder(comm); });
  timed("abort during a split", [&] { testAbortOfAParentEndsItsRunningSplit(comm); });
  timed("CommShrink", [&] { testShrink(comm); });
  timed("errors", [&] { testErrors(comm); });
  timed("misc", [&] { testMisc(comm); });
  timed("single-thread", [&] { testSingleThreadComms(); });

  NCCL_OK(ncclCommFinalize(comm));
  int32_t v = 1;
  ncclResult_t r = ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, nullptr);
  CHECK(r == ncclInvalidUsage, "AllReduce after ncclCommFinalize gave %d", static_cast<int>(r));
  NCCL_OK(ncclCommDestroy(comm));

  std::printf("rank %d of %d: %ld checks, %ld failed\n", gRank, gSize, gChecks, gFailures);
  return gFailures == 0 ? 0 : 1;
}
