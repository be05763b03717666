// Element types and reduction operations: names, parsing, fp16/bf16 conversion and the host reduction kernels.
//
// Speed. Every kernel is one plain loop over elements, `dst[i] = store(op(load(a[i]), load(b[i])))`, with
// the op a functor template parameter and the switch on type and op outside the loop, so that the loop body
// is straight-line code the compiler vectorises. dst may equal a or b: GCC versions such a loop with a runtime
// overlap check that admits exact aliasing, so the vector path runs in place too. GCC 12 vectorises at -O2
// only with its "very cheap" cost model, which refuses loops that need that check or a scalar tail, so this
// file asks for -O3 (the library builds with -O2): measured with perf/bench_reduce at 1 MiB, float32 sum goes
// from 40 to 95 GB/s and max from 13 to 85 GB/s (memcpy: 105 GB/s).
//
// The kernels are compiled twice on x86-64 (GCC): for the baseline (SSE2) and for x86-64-v3 (AVX2, F16C),
// picked at run time from the CPU (kernelIsa()); the same loops, inlined into each entry point. In the
// x86-64-v3 kernels fp16 goes through the F16C conversion instructions (83 against 3.2 GB/s for the portable
// conversion below, which is limited by its arithmetic) and bf16 gains 2x from AVX2 (26 against 12 GB/s); the
// other types run near memory speed either way.
//
// fp16 and bf16 are otherwise widened to float, reduced, and rounded back to nearest-even with integer and
// float arithmetic only (selects, no branches), so these loops vectorise on the baseline target too, where
// _Float16 conversions would be libgcc calls (and GCC 12 does not vectorise them even with F16C). Since float
// carries at least 2p+2 bits of a p-bit format (24 >= 2*11+2), rounding a float sum, product or quotient to
// fp16/bf16 gives the correctly rounded result.
#include "base/datatypes.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/errors.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#define COLLIE_ALWAYS_INLINE __attribute__((always_inline)) inline
// On x86-64 with GCC the kernels are built twice: for the baseline the library is compiled for, and for
// x86-64-v3 (AVX2, FMA, F16C), chosen at run time when the CPU has it (see kernelIsa()).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define COLLIE_X86_KERNELS 1
#define COLLIE_X86_V3 __attribute__((target("arch=x86-64-v3")))
#else
#define COLLIE_X86_KERNELS 0
#endif

namespace collie::base {
namespace {

COLLIE_ALWAYS_INLINE uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

COLLIE_ALWAYS_INLINE float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// fp16 -> float. Exact for every input; a signalling NaN comes back quiet with its payload kept (as the x86
// F16C instruction does).
COLLIE_ALWAYS_INLINE float halfToFloatInline(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t twoW = w + w;  // exponent in bits 31..27, mantissa in 26..17, sign gone
  // Normal numbers, Inf and NaN: move the fields into float position with the exponent raised by 224, then
  // scale by 2^-112, so the exponent ends 112 (= 127 - 15) above the half's; exponent 31 became 255, and
  // Inf * 2^-112 stays Inf, NaN stays NaN.
  const float normal = bitsFloat((twoW >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Denormals (exponent 0), value m * 2^-24: put m into the mantissa of 0.5f (whose ulp is 2^-24) and take
  // the 0.5 away again; exact.
  const float denormal = bitsFloat((twoW >> 17) | 0x3F000000u) - 0.5f;
  // A mask rather than ?: so that both float operations stay unconditional: GCC would move each into its own
  // branch, which (under the default -ftrapping-math) it then cannot turn back into a vector select.
  const uint32_t isDenormal = 0u - static_cast<uint32_t>(twoW < (1u << 27));
  const uint32_t magnitude = (floatBits(denormal) & isDenormal) | (floatBits(normal) & ~isDenormal);
  return bitsFloat(sign | magnitude);
}

// float -> fp16, round to nearest-even. Overflow gives Inf; a NaN gives a quiet NaN with the sign and the top
// payload bits kept (as F16C does).
COLLIE_ALWAYS_INLINE uint16_t floatToHalfInline(float f) {
  const uint32_t w = floatBits(f);
  const uint32_t sign = w & 0x80000000u;
  const uint32_t twoW = w + w;  // exponent in bits 31..24
  // |f| * 4, but Inf when |f| >= 2^16, beyond anything that rounds to a finite half. (Two steps, because 2^114
  // is not a float.)
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  // Add 2^(e+15), e = the exponent of f clamped below at -14 (the smallest normal half exponent): the sum's
  // ulp is then 2^(e-8), so the FPU rounds |f|*4 to 10 bits after its leading one (to nearest-even), or to
  // multiples of 2^-24 in the denormal range.
  uint32_t bias = twoW & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = bitsFloat((bias >> 1) + 0x07800000u) + base;
  // The sum's mantissa holds the rounded half mantissa with its leading one at bit 10 (a carry from rounding
  // reaches bit 11); the low 5 bits of its exponent are the half exponent minus one, so adding the two fields
  // gives the half's exponent and mantissa, and a carry moves on into the exponent, up to Inf.
  const uint32_t bits = floatBits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu);
  const uint32_t nan = 0x7E00u | ((w >> 13) & 0x03FFu);
  const uint32_t isNan = 0u - static_cast<uint32_t>(twoW > 0xFF000000u);  // a mask, as in halfToFloatInline
  return static_cast<uint16_t>((sign >> 16) | (nan & isNan) | (nonsign & ~isNan));
}

COLLIE_ALWAYS_INLINE float bf16ToFloatInline(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

// float -> bf16, round to nearest-even by integer addition (a carry moves into the exponent, up to Inf); a
// NaN keeps its sign and top payload bits and is made quiet, so it cannot round into Inf.
COLLIE_ALWAYS_INLINE uint16_t floatToBf16Inline(float f) {
  const uint32_t w = floatBits(f);
  const uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  const uint32_t nan = (w >> 16) | 0x0040u;
  return static_cast<uint16_t>((w & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

// Codecs: how an element is stored and the type it is computed in.
template <typename T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static T load(T x) { return x; }
  static T store(T x) { return x; }
};
struct Fp16 {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t x) { return halfToFloatInline(x); }
  static uint16_t store(float x) { return floatToHalfInline(x); }
};
struct Bf16 {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t x) { return bf16ToFloatInline(x); }
  static uint16_t store(float x) { return floatToBf16Inline(x); }
};

// Ops. Integer Sum and Prod run in the unsigned type of the same width, so that they wrap without UB.
template <typename T>
using Arith = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>, std::type_identity<T>>::type;

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b)));
  }
};
struct ProdOp {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b)));
  }
};
// Max and Min propagate NaN from either side (std::max would drop a NaN in its first argument), and give the same
// bits for (a, b) as for (b, a): algorithms where two ranks each fold the other's value into their own (direct,
// recursive doubling) rely on it to end with identical bits. Values that compare equal but differ in bits (+0 and
// -0) and pairs of NaNs are settled by the bit patterns (Max gives +0, Min gives -0; of two NaNs the smaller
// pattern). Written without branches (bitwise & and | on the comparisons) so that the loops still vectorise.
template <typename T>
using SameWidthBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
template <typename T>
COLLIE_ALWAYS_INLINE bool firstIsNanWinner(T a, T b) {  // a is a NaN, and b is not or has a larger pattern
  const auto ua = std::bit_cast<SameWidthBits<T>>(a), ub = std::bit_cast<SameWidthBits<T>>(b);
  return (a != a) & ((b == b) | (ua <= ub));
}
struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      const auto ua = std::bit_cast<SameWidthBits<T>>(a), ub = std::bit_cast<SameWidthBits<T>>(b);
      return ((a > b) | ((a == b) & (ua <= ub)) | firstIsNanWinner(a, b)) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};
struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      const auto ua = std::bit_cast<SameWidthBits<T>>(a), ub = std::bit_cast<SameWidthBits<T>>(b);
      return ((a < b) | ((a == b) & (ua >= ub)) | firstIsNanWinner(a, b)) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

// dst[i] = op(a[i], b[i]), widening and narrowing through the codec. Op is an object so that it may carry state
// (the divisor of DivideBy).
template <typename Codec, typename Op>
COLLIE_ALWAYS_INLINE void reduceLoop(void* dstv, const void* av, const void* bv, size_t count, Op op) {
  using S = typename Codec::Storage;
  S* dst = static_cast<S*>(dstv);
  const S* a = static_cast<const S*>(av);
  const S* b = static_cast<const S*>(bv);
  for (size_t i = 0; i < count; ++i) dst[i] = Codec::store(op.apply(Codec::load(a[i]), Codec::load(b[i])));
}

// x / divisor, ignoring the second operand: divideInto is reduceLoop(dst, src, src) with this op.
struct DivideBy {
  double divisor;
  template <typename T>
  T apply(T x, T) const {
    if constexpr (std::is_floating_point_v<T>) {
      return x / static_cast<T>(divisor);  // a true division: x * (1/d) would round twice
    } else {
      // The usual arithmetic conversions make this an int, int64, uint32 or uint64 division; divisor > 0, so the
      // unsigned ones are exact and the signed ones truncate toward zero.
      return static_cast<T>(x / static_cast<int>(divisor));
    }
  }
};

template <typename Codec>
COLLIE_ALWAYS_INLINE void reduceTyped(void* dst, const void* a, const void* b, size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
    case ReduceOp::PreMulSum:
      return reduceLoop<Codec>(dst, a, b, count, SumOp{});
    case ReduceOp::Prod:
      return reduceLoop<Codec>(dst, a, b, count, ProdOp{});
    case ReduceOp::Max:
      return reduceLoop<Codec>(dst, a, b, count, MaxOp{});
    case ReduceOp::Min:
      return reduceLoop<Codec>(dst, a, b, count, MinOp{});
  }
}

template <typename Codec>
COLLIE_ALWAYS_INLINE void runTyped(void* dst, const void* a, const void* b, size_t count, ReduceOp op,
                                   const DivideBy* divideBy) {
  if (divideBy != nullptr) return reduceLoop<Codec>(dst, a, b, count, *divideBy);
  reduceTyped<Codec>(dst, a, b, count, op);
}

// Every loop of reduce() (with op) or of divideInPlace() (with divideBy set), inlined into the caller, so that a
// kernel entry point compiled for an instruction set holds all of them compiled for it.
COLLIE_ALWAYS_INLINE void runKernel(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                                    const DivideBy* divideBy) {
  switch (type) {
    case DataType::Int8:
      return runTyped<Plain<int8_t>>(dst, a, b, count, op, divideBy);
    case DataType::Uint8:
      return runTyped<Plain<uint8_t>>(dst, a, b, count, op, divideBy);
    case DataType::Int32:
      return runTyped<Plain<int32_t>>(dst, a, b, count, op, divideBy);
    case DataType::Uint32:
      return runTyped<Plain<uint32_t>>(dst, a, b, count, op, divideBy);
    case DataType::Int64:
      return runTyped<Plain<int64_t>>(dst, a, b, count, op, divideBy);
    case DataType::Uint64:
      return runTyped<Plain<uint64_t>>(dst, a, b, count, op, divideBy);
    case DataType::Float16:
      return runTyped<Fp16>(dst, a, b, count, op, divideBy);
    case DataType::Float32:
      return runTyped<Plain<float>>(dst, a, b, count, op, divideBy);
    case DataType::Float64:
      return runTyped<Plain<double>>(dst, a, b, count, op, divideBy);
    case DataType::Bfloat16:
      return runTyped<Bf16>(dst, a, b, count, op, divideBy);
  }
}

void kernelPortable(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                    const DivideBy* divideBy) {
  runKernel(dst, a, b, count, type, op, divideBy);
}

#if COLLIE_X86_KERNELS
// fp16 with F16C: 64 elements at a time are widened with vcvtph2ps into float arrays, combined by the op in a
// loop the compiler vectorises, and narrowed with vcvtps2ph (round to nearest-even, like floatToHalfInline, NaN
// handling included). A block is read whole before it is written, so dst may alias a or b.
template <typename Op>
COLLIE_X86_V3 COLLIE_ALWAYS_INLINE void reduceHalfF16c(void* dstv, const void* av, const void* bv, size_t count,
                                                       Op op) {
  constexpr size_t kBlock = 64;
  uint16_t* dst = static_cast<uint16_t*>(dstv);
  const uint16_t* a = static_cast<const uint16_t*>(av);
  const uint16_t* b = static_cast<const uint16_t*>(bv);
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    alignas(32) float x[kBlock];
    alignas(32) float y[kBlock];
    for (size_t j = 0; j < kBlock; j += 8) {
      _mm256_store_ps(x + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + j))));
      _mm256_store_ps(y + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i + j))));
    }
    for (size_t j = 0; j < kBlock; ++j) x[j] = op.apply(x[j], y[j]);
    for (size_t j = 0; j < kBlock; j += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + j),
                       _mm256_cvtps_ph(_mm256_load_ps(x + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
  reduceLoop<Fp16>(dst + i, a + i, b + i, count - i, op);
}

COLLIE_X86_V3 void halfKernelV3(void* dst, const void* a, const void* b, size_t count, ReduceOp op,
                                const DivideBy* divideBy) {
  if (divideBy != nullptr) return reduceHalfF16c(dst, a, b, count, *divideBy);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
    case ReduceOp::PreMulSum:
      return reduceHalfF16c(dst, a, b, count, SumOp{});
    case ReduceOp::Prod:
      return reduceHalfF16c(dst, a, b, count, ProdOp{});
    case ReduceOp::Max:
      return reduceHalfF16c(dst, a, b, count, MaxOp{});
    case ReduceOp::Min:
      return reduceHalfF16c(dst, a, b, count, MinOp{});
  }
}

COLLIE_X86_V3 void kernelV3(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                            const DivideBy* divideBy) {
  if (type == DataType::Float16) return halfKernelV3(dst, a, b, count, op, divideBy);
  runKernel(dst, a, b, count, type, op, divideBy);
}
#endif

bool isaSupported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::Portable:
      return true;
    case KernelIsa::X86V3:
#if COLLIE_X86_KERNELS
      __builtin_cpu_init();
      return __builtin_cpu_supports("x86-64-v3");
#else
      return false;
#endif
  }
  return false;
}

std::atomic<KernelIsa>& activeIsa() {
  static std::atomic<KernelIsa> isa{isaSupported(KernelIsa::X86V3) ? KernelIsa::X86V3 : KernelIsa::Portable};
  return isa;
}

void kernel(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
            const DivideBy* divideBy) {
#if COLLIE_X86_KERNELS
  if (activeIsa().load(std::memory_order_relaxed) == KernelIsa::X86V3) {
    return kernelV3(dst, a, b, count, type, op, divideBy);
  }
#endif
  kernelPortable(dst, a, b, count, type, op, divideBy);
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equalsIgnoreCase(const std::string& s, const char* name) {
  size_t i = 0;
  for (; i < s.size() && name[i] != '\0'; ++i) {
    if (lower(s[i]) != name[i]) return false;
  }
  return i == s.size() && name[i] == '\0';
}

constexpr int kNumDataTypes = 10;
constexpr int kNumReduceOps = 6;
constexpr int kNumNamedOps = 5;  // those a name alone makes: PreMulSum needs its factor

}  // namespace

size_t dataTypeSize(DataType type) {
  switch (type) {
    case DataType::Int8:
    case DataType::Uint8:
      return 1;
    case DataType::Float16:
    case DataType::Bfloat16:
      return 2;
    case DataType::Int32:
    case DataType::Uint32:
    case DataType::Float32:
      return 4;
    case DataType::Int64:
    case DataType::Uint64:
    case DataType::Float64:
      return 8;
  }
  return 0;
}

const char* dataTypeName(DataType type) {
  static const char* const kNames[kNumDataTypes] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                                    "uint64", "float16", "float32", "float64", "bfloat16"};
  int t = static_cast<int>(type);
  return isValidDataType(t) ? kNames[t] : "invalid";
}

const char* dataTypeShortName(DataType type) {
  static const char* const kNames[kNumDataTypes] = {"int8",   "uint8", "int32", "uint32", "int64",
                                                    "uint64", "half",  "float", "double", "bfloat16"};
  int t = static_cast<int>(type);
  return isValidDataType(t) ? kNames[t] : "invalid";
}

const char* reduceOpName(ReduceOp op) {
  static const char* const kNames[kNumReduceOps] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  int o = static_cast<int>(op);
  return isValidReduceOp(o) ? kNames[o] : "invalid";
}

bool isValidDataType(int type) { return type >= 0 && type < kNumDataTypes; }
bool isValidReduceOp(int op) { return op >= 0 && op < kNumReduceOps; }

bool parseDataType(const std::string& name, DataType* type) {
  struct Alias {
    const char* name;
    DataType type;
  };
  static const Alias kAliases[] = {{"fp16", DataType::Float16},
                                   {"fp32", DataType::Float32},
                                   {"fp64", DataType::Float64},
                                   {"bf16", DataType::Bfloat16},
                                   {"char", DataType::Int8}};
  for (int t = 0; t < kNumDataTypes; ++t) {
    DataType candidate = static_cast<DataType>(t);
    if (equalsIgnoreCase(name, dataTypeName(candidate)) || equalsIgnoreCase(name, dataTypeShortName(candidate))) {
      *type = candidate;
      return true;
    }
  }
  for (const Alias& alias : kAliases) {
    if (equalsIgnoreCase(name, alias.name)) {
      *type = alias.type;
      return true;
    }
  }
  return false;
}

bool parseReduceOp(const std::string& name, ReduceOp* op) {
  for (int o = 0; o < kNumNamedOps; ++o) {
    ReduceOp candidate = static_cast<ReduceOp>(o);
    if (equalsIgnoreCase(name, reduceOpName(candidate))) {
      *op = candidate;
      return true;
    }
  }
  return false;
}

float halfToFloat(uint16_t h) { return halfToFloatInline(h); }
uint16_t floatToHalf(float f) { return floatToHalfInline(f); }
float bf16ToFloat(uint16_t b) { return bf16ToFloatInline(b); }
uint16_t floatToBf16(float f) { return floatToBf16Inline(f); }

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) {
  COLLIE_ARG_CHECK(isValidDataType(static_cast<int>(type)), "invalid data type %d", static_cast<int>(type));
  COLLIE_ARG_CHECK(isValidReduceOp(static_cast<int>(op)), "invalid reduction op %d", static_cast<int>(op));
  kernel(dst, a, b, count, type, op, nullptr);
}

AvgDivisors avgDivisors(DataType type, int nranks) {
  const bool floating =
      type == DataType::Float16 || type == DataType::Float32 || type == DataType::Float64 || type == DataType::Bfloat16;
  if (!floating || nranks <= 1) return {1, static_cast<double>(std::max(nranks, 1))};
  const double pow2 = static_cast<double>(std::bit_ceil(static_cast<unsigned>(nranks)));
  return {pow2, nranks / pow2};
}

void divideInto(void* dst, const void* src, size_t count, DataType type, double divisor) {
  COLLIE_ARG_CHECK(isValidDataType(static_cast<int>(type)), "invalid data type %d", static_cast<int>(type));
  COLLIE_ARG_CHECK(divisor > 0, "divideInto: divisor %g is not positive", divisor);
  const DivideBy divideBy{divisor};
  kernel(dst, src, src, count, type, ReduceOp::Sum, &divideBy);
}

namespace {

constexpr size_t kScaleBlockBytes = 4096;  // the unit scaleInto and reduceScaled work in: it stays in L1

// Scales blocks of at most kScaleBlockBytes: a division by DivideBy, or a multiplication by Prod against a block
// holding the factor over and over (the reduction kernels' multiply: vectorised, fp16/bf16 through float,
// integers wrapping), filled once for at most `count` elements by doubling copies.
class BlockScaler {
 public:
  BlockScaler(DataType type, const InputScale& scale, size_t count)
      : type_(type), elem_(dataTypeSize(type)), multiply_(scale.multiply), divideBy_{scale.divisor} {
    COLLIE_ARG_CHECK(elem_ != 0, "invalid data type %d", static_cast<int>(type));
    if (!multiply_) {
      COLLIE_ARG_CHECK(scale.divisor > 0, "divideInto: divisor %g is not positive", scale.divisor);
      return;
    }
    const size_t n = std::min(kScaleBlockBytes / elem_, count);
    if (n > 0) std::memcpy(factors_, &scale.factor, elem_);
    for (size_t filled = 1; filled < n;) {
      const size_t more = std::min(filled, n - filled);
      std::memcpy(factors_ + filled * elem_, factors_, more * elem_);
      filled += more;
    }
  }
  size_t blockCount() const { return kScaleBlockBytes / elem_; }
  void apply(void* dst, const void* src, size_t n) const {  // n <= blockCount()
    if (multiply_)
      kernel(dst, src, factors_, n, type_, ReduceOp::Prod, nullptr);
    else
      kernel(dst, src, src, n, type_, ReduceOp::Sum, &divideBy_);
  }

 private:
  DataType type_;
  size_t elem_;
  bool multiply_;
  DivideBy divideBy_;
  alignas(64) unsigned char factors_[kScaleBlockBytes];
};

}  // namespace

void scaleInto(void* dst, const void* src, size_t count, DataType type, const InputScale& scale) {
  COLLIE_ARG_CHECK(isValidDataType(static_cast<int>(type)), "invalid data type %d", static_cast<int>(type));
  if (!scale.multiply) return divideInto(dst, src, count, type, scale.divisor);  // one pass, no blocks needed
  const BlockScaler scaler(type, scale, count);
  const size_t elem = dataTypeSize(type), step = scaler.blockCount();
  for (size_t done = 0; done < count; done += step)
    scaler.apply(static_cast<char*>(dst) + done * elem, static_cast<const char*>(src) + done * elem,
                 std::min(step, count - done));
}

void reduceScaled(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                  const InputScale& scale, bool scaledSecond) {
  COLLIE_ARG_CHECK(isValidDataType(static_cast<int>(type)), "invalid data type %d", static_cast<int>(type));
  COLLIE_ARG_CHECK(isValidReduceOp(static_cast<int>(op)), "invalid reduction op %d", static_cast<int>(op));
  const BlockScaler scaler(type, scale, count);
  const size_t elem = dataTypeSize(type), step = scaler.blockCount();
  alignas(64) unsigned char scaled[kScaleBlockBytes];
  auto* out = static_cast<unsigned char*>(dst);
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (size_t done = 0; done < count; done += step) {
    const size_t n = std::min(step, count - done), at = done * elem;
    scaler.apply(scaled, x + at, n);  // read before dst's block is written: dst may alias a
    if (scaledSecond)
      kernel(out + at, y + at, scaled, n, type, op, nullptr);
    else
      kernel(out + at, scaled, y + at, n, type, op, nullptr);
  }
}

KernelIsa kernelIsa() { return activeIsa().load(std::memory_order_relaxed); }

bool setKernelIsa(KernelIsa isa) {
  if (!isaSupported(isa)) return false;
  activeIsa().store(isa, std::memory_order_relaxed);
  return true;
}

const char* kernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::Portable:
      return "portable";
    case KernelIsa::X86V3:
      return "x86-64-v3";
  }
  return "invalid";
}

}  // namespace collie::base
