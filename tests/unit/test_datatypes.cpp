// Unit tests of src/core/datatypes: names and parsing, fp16/bf16 conversion (exhaustively, against a reference
// written with double arithmetic), and reduce() / divideInPlace() for every type and op against a scalar
// reference, element by element, at odd lengths, misaligned and in place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/datatypes.hpp"

namespace collie::base {
namespace {

constexpr DataType kAllTypes[] = {DataType::Int8,    DataType::Uint8,   DataType::Int32,   DataType::Uint32,
                                  DataType::Int64,   DataType::Uint64,  DataType::Float16, DataType::Float32,
                                  DataType::Float64, DataType::Bfloat16};
constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg};
constexpr size_t kLengths[] = {0, 1, 7, 1027};
constexpr KernelIsa kAllIsas[] = {KernelIsa::Portable, KernelIsa::X86V3};

// The kernel variants this build and CPU can run; each test of reduce() runs under all of them.
std::vector<base::KernelIsa> supportedIsas() {
  const KernelIsa saved = kernelIsa();
  std::vector<base::KernelIsa> isas;
  for (base::KernelIsa isa : kAllIsas) {
    if (setKernelIsa(isa)) isas.push_back(isa);
  }
  base::setKernelIsa(saved);
  return isas;
}

// Selects a kernel variant for one scope, restoring the previous one at its end.
class IsaScope {
 public:
  explicit IsaScope(KernelIsa isa) : saved_(kernelIsa()) { EXPECT_TRUE(setKernelIsa(isa)); }
  ~IsaScope() { base::setKernelIsa(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  KernelIsa saved_;
};

// ---- Reference conversions: a binary16-like format with `mantBits` mantissa and `expBits` exponent bits --------

struct Format {
  int mantBits;
  int expBits;
  int bias() const { return (1 << (expBits - 1)) - 1; }
  uint16_t expMask() const { return static_cast<uint16_t>(((1 << expBits) - 1) << mantBits); }
};
constexpr Format kHalf{10, 5};
constexpr Format kBf16{7, 8};

double refDecode(uint16_t bits, Format fmt) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int e = (bits >> fmt.mantBits) & ((1 << fmt.expBits) - 1);
  const int m = bits & ((1 << fmt.mantBits) - 1);
  if (e == (1 << fmt.expBits) - 1) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - fmt.bias() - fmt.mantBits);
  return sign * std::ldexp(1.0 + std::ldexp(m, -fmt.mantBits), e - fmt.bias());
}

// Rounds x to the format, to nearest-even; NaN gives the canonical quiet NaN (only NaN-ness is compared).
uint16_t refEncode(double x, Format fmt) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | fmt.expMask() | (1 << (fmt.mantBits - 1)));
  const double a = std::fabs(x);
  const int minExp = 1 - fmt.bias();
  const double maxFinite = std::ldexp(2.0 - std::ldexp(1.0, -fmt.mantBits), fmt.bias());
  if (std::isinf(a)) return sign | fmt.expMask();
  const int e = a == 0 ? minExp : std::max(std::ilogb(a), minExp);
  const double quantum = std::ldexp(1.0, e - fmt.mantBits);
  const double r = std::nearbyint(a / quantum) * quantum;  // default rounding mode: to nearest-even
  if (r > maxFinite) return sign | fmt.expMask();
  if (r < std::ldexp(1.0, minExp)) {
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r / std::ldexp(1.0, minExp - fmt.mantBits)));
  }
  const int re = std::ilogb(r);
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(r / std::ldexp(1.0, re) - 1.0, fmt.mantBits));
  return static_cast<uint16_t>(sign | ((re + fmt.bias()) << fmt.mantBits) | mant);
}

bool isNanBits(uint16_t bits, Format fmt) {
  return (bits & fmt.expMask()) == fmt.expMask() && (bits & ((1 << fmt.mantBits) - 1)) != 0;
}

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// ---- Names, validation, parsing -------------------------------------------------------------------------------

TEST(DataTypes, SizesAndNames) {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  const char* names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                         "uint64", "float16", "float32", "float64", "bfloat16"};
  const char* shortNames[] = {"int8",   "uint8", "int32", "uint32", "int64",
                              "uint64", "half",  "float", "double", "bfloat16"};
  for (int t = 0; t < 10; ++t) {
    DataType type = static_cast<DataType>(t);
    EXPECT_EQ(base::dataTypeSize(type), sizes[t]) << t;
    EXPECT_STREQ(base::dataTypeName(type), names[t]);
    EXPECT_STREQ(base::dataTypeShortName(type), shortNames[t]);
    EXPECT_EQ(static_cast<int>(type), static_cast<int>(static_cast<collieDataType_t>(t)));
  }
  EXPECT_EQ(base::dataTypeSize(static_cast<DataType>(10)), 0u);
  EXPECT_STREQ(base::dataTypeName(static_cast<DataType>(-1)), "invalid");
  EXPECT_STREQ(base::dataTypeShortName(static_cast<DataType>(10)), "invalid");
  const char* ops[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  for (int o = 0; o < 6; ++o) EXPECT_STREQ(base::reduceOpName(static_cast<ReduceOp>(o)), ops[o]);
  EXPECT_STREQ(base::reduceOpName(static_cast<ReduceOp>(6)), "invalid");
}

TEST(DataTypes, Validity) {
  for (int t = -2; t < 12; ++t) EXPECT_EQ(base::isValidDataType(t), t >= 0 && t <= 9) << t;
  for (int o = -2; o < 8; ++o) EXPECT_EQ(base::isValidReduceOp(o), o >= 0 && o <= 5) << o;
  EXPECT_EQ(collieNumTypes, 10);
  EXPECT_EQ(collieNumOps, 5);
}

TEST(DataTypes, Parse) {
  for (DataType t : kAllTypes) {
    DataType got = DataType::Int8;
    EXPECT_TRUE(base::parseDataType(base::dataTypeName(t), &got));
    EXPECT_EQ(got, t);
    got = DataType::Int8;
    EXPECT_TRUE(base::parseDataType(base::dataTypeShortName(t), &got));
    EXPECT_EQ(got, t);
  }
  DataType t = DataType::Int8;
  EXPECT_TRUE(base::parseDataType("HALF", &t));
  EXPECT_EQ(t, DataType::Float16);
  EXPECT_TRUE(base::parseDataType("bf16", &t));
  EXPECT_EQ(t, DataType::Bfloat16);
  EXPECT_TRUE(base::parseDataType("fp32", &t));
  EXPECT_EQ(t, DataType::Float32);
  EXPECT_TRUE(base::parseDataType("Double", &t));
  EXPECT_EQ(t, DataType::Float64);
  for (const char* bad : {"", "float8", "int", "floa", "float322", "int16"}) {
    t = DataType::Uint8;
    EXPECT_FALSE(base::parseDataType(bad, &t)) << bad;
    EXPECT_EQ(t, DataType::Uint8);
  }
  for (ReduceOp o : kAllOps) {
    ReduceOp got = ReduceOp::Sum;
    EXPECT_TRUE(base::parseReduceOp(base::reduceOpName(o), &got));
    EXPECT_EQ(got, o);
  }
  ReduceOp o = ReduceOp::Sum;
  EXPECT_TRUE(base::parseReduceOp("MAX", &o));
  EXPECT_EQ(o, ReduceOp::Max);
  for (const char* bad : {"", "mulsum", "su", "sums", "premulsum"}) {  // premulsum needs a factor: no name makes it
    o = ReduceOp::Min;
    EXPECT_FALSE(base::parseReduceOp(bad, &o)) << bad;
    EXPECT_EQ(o, ReduceOp::Min);
  }
}

// ---- fp16 / bf16 conversion -----------------------------------------------------------------------------------

// Every fp16 bit pattern decodes to its reference value; every non-NaN one survives the round trip bit for bit,
// and NaN stays NaN with its sign.
TEST(DataTypes, HalfAllBitPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = base::halfToFloat(bits);
    const double ref = refDecode(bits, kHalf);
    if (isNanBits(bits, kHalf)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = base::floatToHalf(f);
      ASSERT_TRUE(isNanBits(back, kHalf)) << std::hex << h << " -> " << back;
      ASSERT_EQ(back & 0x8000, bits & 0x8000) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (bits & 0x8000) != 0) << std::hex << h;
    ASSERT_EQ(base::floatToHalf(f), bits) << std::hex << h;
  }
}

TEST(DataTypes, Bf16AllBitPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = base::bf16ToFloat(bits);
    ASSERT_EQ(floatBits(f), h << 16) << std::hex << h;
    if (isNanBits(bits, kBf16)) {
      ASSERT_TRUE(std::isnan(f));
      const uint16_t back = base::floatToBf16(f);
      ASSERT_TRUE(isNanBits(back, kBf16)) << std::hex << h << " -> " << back;
      ASSERT_EQ(back & 0x8000, bits & 0x8000);
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), refDecode(bits, kBf16)) << std::hex << h;
    ASSERT_EQ(base::floatToBf16(f), bits) << std::hex << h;
  }
}

// Between every two adjacent finite values (both signs, denormals included, and the largest finite against the
// overflow threshold) the exact midpoint rounds to the even one, and the floats just beside it to the nearer.
void checkTies(Format fmt, uint16_t (*encode)(float)) {
  const uint16_t maxFinite = static_cast<uint16_t>(fmt.expMask() - 1);
  for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
    for (uint32_t m = 0; m <= maxFinite; ++m) {
      const uint16_t lo = static_cast<uint16_t>(sign | m);
      const uint16_t hi = static_cast<uint16_t>(sign | (m + 1));  // m + 1 == expMask: Inf
      const double dlo = refDecode(lo, fmt);
      // The next value up, extended past the largest finite one as if the exponent were unbounded.
      const double dhi = m == maxFinite ? std::copysign(std::ldexp(1.0, fmt.bias() + 1), dlo) : refDecode(hi, fmt);
      const float mid = static_cast<float>((dlo + dhi) / 2);
      ASSERT_EQ(static_cast<double>(mid), (dlo + dhi) / 2) << "midpoint not exact in float";
      const uint16_t even = (m & 1) ? hi : lo;
      ASSERT_EQ(encode(mid), even) << std::hex << "tie between " << lo << " and " << hi;
      const float towardLo = std::nextafter(mid, static_cast<float>(dlo));
      const float towardHi = std::nextafter(mid, static_cast<float>(std::copysign(INFINITY, dhi)));
      ASSERT_EQ(encode(towardLo), lo) << std::hex << lo;
      ASSERT_EQ(encode(towardHi), hi) << std::hex << hi;
    }
  }
}

TEST(DataTypes, HalfRoundingTies) { checkTies(kHalf, base::floatToHalf); }
TEST(DataTypes, Bf16RoundingTies) { checkTies(kBf16, base::floatToBf16); }

TEST(DataTypes, ConversionSpecialValues) {
  EXPECT_EQ(base::floatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(base::floatToHalf(65519.99f), 0x7BFF);
  EXPECT_EQ(base::floatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(base::floatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(base::floatToHalf(-INFINITY), 0xFC00);
  EXPECT_EQ(base::floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(base::floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest denormal
  EXPECT_EQ(base::floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even (zero)
  EXPECT_EQ(base::floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(base::floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(base::floatToHalf(1.0f), 0x3C00);
  EXPECT_TRUE(isNanBits(base::floatToHalf(std::numeric_limits<float>::quiet_NaN()), kHalf));
  EXPECT_TRUE(isNanBits(base::floatToHalf(std::numeric_limits<float>::signaling_NaN()), kHalf));
  EXPECT_TRUE(isNanBits(base::floatToHalf(bitsFloat(0x7F800001u)), kHalf));  // payload only in the low bits
  EXPECT_TRUE(isNanBits(base::floatToBf16(bitsFloat(0x7F800001u)), kBf16));  // must not round into Inf
  EXPECT_TRUE(isNanBits(base::floatToBf16(bitsFloat(0xFFFFFFFFu)), kBf16));  // must not carry into the sign
  EXPECT_EQ(base::floatToBf16(bitsFloat(0x7F7FFFFFu)), 0x7F80);              // largest float rounds to Inf
  EXPECT_EQ(base::floatToBf16(INFINITY), 0x7F80);
  EXPECT_EQ(base::floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(base::floatToBf16(bitsFloat(0x3F808000u)), 0x3F80);  // tie, to even
  EXPECT_EQ(base::floatToBf16(bitsFloat(0x3F818000u)), 0x3F82);  // tie, to even (up)
  EXPECT_EQ(base::floatToBf16(bitsFloat(0x00000001u)), 0x0000);  // float denormal
  EXPECT_EQ(base::floatToBf16(bitsFloat(0x00018000u)), 0x0002);  // bf16 denormal tie, to even (up)
}

// Random float bit patterns (every exponent, NaNs and denormals included) against the reference.
TEST(DataTypes, ConversionRandomFloats) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 2000000; ++i) {
    const float f = bitsFloat(rng());
    const uint16_t h = base::floatToHalf(f);
    const uint16_t b = base::floatToBf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(isNanBits(h, kHalf));
      ASSERT_TRUE(isNanBits(b, kBf16));
    } else {
      ASSERT_EQ(h, refEncode(f, kHalf)) << std::hexfloat << f;
      ASSERT_EQ(b, refEncode(f, kBf16)) << std::hexfloat << f;
    }
  }
}

#if defined(__FLT16_MANT_DIG__) && !defined(__clang__)
// Cross-check against the compiler's own _Float16 conversions, where it has them.
TEST(DataTypes, HalfMatchesCompilerFloat16) {
  std::mt19937 rng(777);
  for (int i = 0; i < 1000000; ++i) {
    const float f = bitsFloat(rng());
    if (std::isnan(f)) continue;
    const _Float16 c = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &c, sizeof bits);
    ASSERT_EQ(base::floatToHalf(f), bits) << std::hexfloat << f;
    ASSERT_EQ(base::halfToFloat(bits), static_cast<float>(c));
  }
}
#endif

// ---- reduce() and divideInPlace() against a scalar reference --------------------------------------------------

// Per-type reference: storage type, input generation, op and comparison. Every reference computes in a wider
// type (or exactly) and rounds once, independently of the implementation.
template <typename T>
struct IntRef {
  using S = T;
  static S random(std::mt19937_64& rng) {
    switch (rng() % 8) {
      case 0:
        return std::numeric_limits<T>::max();
      case 1:
        return std::numeric_limits<T>::min();
      case 2:
        return static_cast<T>(rng() % 5);  // small values, so that some products do not wrap
      default:
        return static_cast<T>(rng());
    }
  }
  static S apply(S a, S b, ReduceOp op) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
      case ReduceOp::PreMulSum:  // as Sum: the input's scaling comes before the kernels
        return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));  // modulo 2^width
      case ReduceOp::Prod:
        return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case ReduceOp::Max:
        return std::max(a, b);
      case ReduceOp::Min:
        return std::min(a, b);
    }
    return 0;
  }
  static S divide(S x, int d) {
    // Truncation toward zero, computed in 128 bits to stay independent of the implementation's types.
    const __int128 q = static_cast<__int128>(x) / d;
    return static_cast<T>(q);
  }
  static bool same(S expected, S actual, ReduceOp) { return expected == actual; }
  static std::string show(S v) { return std::to_string(v); }
};

double specialValue(std::mt19937_64& rng) {
  const double values[] = {0.0, -0.0, INFINITY, -INFINITY, std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0};
  return values[rng() % 7];
}

// A value mostly in [-100, 100], sometimes special (zeros, Inf, NaN), sometimes tiny or huge.
double randomReal(std::mt19937_64& rng) {
  const uint64_t k = rng() % 16;
  const double u = static_cast<double>(rng() % 2000001) / 10000.0 - 100.0;
  if (k == 0) return specialValue(rng);
  if (k == 1) return u * 1e-7;   // denormal for fp16, tiny for the others
  if (k == 2) return u * 1e4;    // overflows fp16 in sums and products
  if (k == 3) return u * 1e-40;  // denormal for float and bf16, zero for fp16
  return u;
}

template <typename F>
struct FloatRef {
  using S = F;
  static S random(std::mt19937_64& rng) {
    const double v = randomReal(rng);
    if (rng() % 32 == 0) return static_cast<F>(v * 1e-310);  // a double denormal (zero for float)
    return static_cast<F>(v);
  }
  // float: the double result of two floats, rounded once, is the correctly rounded float result. double: the
  // hardware result is the reference (there is no wider exact type at hand).
  static S apply(S a, S b, ReduceOp op) {
    const double x = a, y = b;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
      case ReduceOp::PreMulSum:  // as Sum: the input's scaling comes before the kernels
        return static_cast<F>(std::is_same_v<F, double> ? a + b : x + y);
      case ReduceOp::Prod:
        return static_cast<F>(std::is_same_v<F, double> ? a * b : x * y);
      case ReduceOp::Max:
        return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<F>::quiet_NaN() : std::max(a, b);
      case ReduceOp::Min:
        return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<F>::quiet_NaN() : std::min(a, b);
    }
    return 0;
  }
  static S divide(S x, int d) {
    return std::is_same_v<F, double> ? static_cast<F>(x / d) : static_cast<F>(static_cast<double>(x) / d);
  }
  // NaN matches any NaN; Max/Min of +0 and -0 may give either; otherwise bit for bit.
  static bool same(S expected, S actual, ReduceOp op) {
    if (std::isnan(expected)) return std::isnan(actual);
    if (op == ReduceOp::Max || op == ReduceOp::Min) return expected == actual && !std::isnan(actual);
    return std::memcmp(&expected, &actual, sizeof(S)) == 0;
  }
  static std::string show(S v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
    return buf;
  }
};

template <const Format& kFmt>
struct Small16Ref {
  using S = uint16_t;
  static S random(std::mt19937_64& rng) { return refEncode(randomReal(rng), kFmt); }
  // Products and sums of two values with at most 11 significant bits are exact in double; one rounding.
  static S apply(S a, S b, ReduceOp op) {
    const double x = refDecode(a, kFmt), y = refDecode(b, kFmt);
    double r = 0;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
      case ReduceOp::PreMulSum:  // as Sum: the input's scaling comes before the kernels
        r = x + y;
        break;
      case ReduceOp::Prod:
        r = x * y;
        break;
      case ReduceOp::Max:
        r = (std::isnan(x) || std::isnan(y)) ? NAN : std::max(x, y);
        break;
      case ReduceOp::Min:
        r = (std::isnan(x) || std::isnan(y)) ? NAN : std::min(x, y);
        break;
    }
    return refEncode(r, kFmt);
  }
  static S divide(S x, int d) { return refEncode(refDecode(x, kFmt) / d, kFmt); }
  static bool same(S expected, S actual, ReduceOp op) {
    if (isNanBits(expected, kFmt)) return isNanBits(actual, kFmt);
    if (op == ReduceOp::Max || op == ReduceOp::Min) return refDecode(expected, kFmt) == refDecode(actual, kFmt);
    return expected == actual;
  }
  static std::string show(S v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%04x (%a)", v, refDecode(v, kFmt));
    return buf;
  }
};

template <typename R, DataType kType>
struct Case {
  using Ref = R;
  static constexpr DataType type = kType;
};

template <typename C>
class ReduceTest : public ::testing::Test {};

}  // namespace
}  // namespace collie::base

// One short, global name per case: CTest names typed tests after the type (CMake's discovery cannot read
// gtest's named typed suites), so ctest -N shows e.g. "ReduceTest/reduce_case::float16".
namespace reduce_case {
namespace cb = collie::base;
struct int8 : cb::Case<cb::IntRef<int8_t>, collie::DataType::Int8> {};
struct uint8 : cb::Case<cb::IntRef<uint8_t>, collie::DataType::Uint8> {};
struct int32 : cb::Case<cb::IntRef<int32_t>, collie::DataType::Int32> {};
struct uint32 : cb::Case<cb::IntRef<uint32_t>, collie::DataType::Uint32> {};
struct int64 : cb::Case<cb::IntRef<int64_t>, collie::DataType::Int64> {};
struct uint64 : cb::Case<cb::IntRef<uint64_t>, collie::DataType::Uint64> {};
struct float16 : cb::Case<cb::Small16Ref<cb::kHalf>, collie::DataType::Float16> {};
struct float32 : cb::Case<cb::FloatRef<float>, collie::DataType::Float32> {};
struct float64 : cb::Case<cb::FloatRef<double>, collie::DataType::Float64> {};
struct bfloat16 : cb::Case<cb::Small16Ref<cb::kBf16>, collie::DataType::Bfloat16> {};
}  // namespace reduce_case

namespace collie::base {
namespace {

using Cases = ::testing::Types<reduce_case::int8, reduce_case::uint8, reduce_case::int32, reduce_case::uint32,
                               reduce_case::int64, reduce_case::uint64, reduce_case::float16, reduce_case::float32,
                               reduce_case::float64, reduce_case::bfloat16>;
TYPED_TEST_SUITE(ReduceTest, Cases);

template <typename S>
std::vector<S> randomVector(size_t n, std::mt19937_64& rng, S (*gen)(std::mt19937_64&)) {
  std::vector<S> v(n);
  for (auto& x : v) x = gen(rng);
  return v;
}

// Out of place, at several misalignments, for every op and length; then in place into a, into b, and with
// a == b == dst.
TYPED_TEST(ReduceTest, EveryOpAgainstReference) {
  using Ref = typename TypeParam::Ref;
  using S = typename Ref::S;
  constexpr DataType type = TypeParam::type;
  ASSERT_EQ(dataTypeSize(type), sizeof(S));
  std::mt19937_64 rng(static_cast<uint64_t>(type) * 1000 + 1);
  for (base::KernelIsa isa : supportedIsas()) {
    IsaScope scope(isa);
    for (ReduceOp op : kAllOps) {
      for (size_t n : kLengths) {
        SCOPED_TRACE(std::string(kernelIsaName(isa)) + " " + reduceOpName(op) + " n=" + std::to_string(n));
        const std::vector<S> a = randomVector<S>(n, rng, Ref::random);
        const std::vector<S> b = randomVector<S>(n, rng, Ref::random);
        std::vector<S> expected(n);
        for (size_t i = 0; i < n; ++i) expected[i] = Ref::apply(a[i], b[i], op);

        auto check = [&](const S* got, const char* how) {
          for (size_t i = 0; i < n; ++i) {
            ASSERT_TRUE(Ref::same(expected[i], got[i], op))
                << how << " element " << i << ": " << Ref::show(a[i]) << " " << reduceOpName(op) << " "
                << Ref::show(b[i]) << " = " << Ref::show(got[i]) << ", expected " << Ref::show(expected[i]);
          }
        };

        // Out of place; the three buffers at different offsets from their allocation.
        for (size_t shift : {0, 1, 3}) {
          std::vector<S> ab(n + 4), bb(n + 4), db(n + 4);
          std::copy(a.begin(), a.end(), ab.begin() + shift);
          std::copy(b.begin(), b.end(), bb.begin() + (shift + 1) % 4);
          S* dst = db.data() + (shift + 2) % 4;
          const S sentinel = static_cast<S>(0x5A);
          std::fill(db.begin(), db.end(), sentinel);
          reduce(dst, ab.data() + shift, bb.data() + (shift + 1) % 4, n, type, op);
          check(dst, "out of place");
          for (S* p = db.data(); p < dst; ++p) ASSERT_EQ(*p, sentinel) << "wrote before dst";
          for (S* p = dst + n; p < db.data() + db.size(); ++p) ASSERT_EQ(*p, sentinel) << "wrote past dst + count";
        }
        {
          std::vector<S> inout = a;
          reduce(inout.data(), inout.data(), b.data(), n, type, op);
          check(inout.data(), "dst == a");
        }
        {
          std::vector<S> inout = b;
          reduce(inout.data(), a.data(), inout.data(), n, type, op);
          check(inout.data(), "dst == b");
        }
        {
          std::vector<S> inout = a;
          reduce(inout.data(), inout.data(), inout.data(), n, type, op);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_TRUE(Ref::same(Ref::apply(a[i], a[i], op), inout[i], op)) << "dst == a == b element " << i;
          }
        }
      }
    }
  }
}

TYPED_TEST(ReduceTest, DivideInPlace) {
  using Ref = typename TypeParam::Ref;
  using S = typename Ref::S;
  constexpr DataType type = TypeParam::type;
  std::mt19937_64 rng(static_cast<uint64_t>(type) * 1000 + 2);
  for (base::KernelIsa isa : supportedIsas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernelIsaName(isa));
    for (int divisor : {1, 2, 3, 7, 8, 1000}) {
      for (size_t n : kLengths) {
        const std::vector<S> x = randomVector<S>(n, rng, Ref::random);
        std::vector<S> buf = x;
        divideInPlace(buf.data(), n, type, divisor);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(Ref::same(Ref::divide(x[i], divisor), buf[i], ReduceOp::Sum))
              << Ref::show(x[i]) << " / " << divisor << " = " << Ref::show(buf[i]) << ", expected "
              << Ref::show(Ref::divide(x[i], divisor));
        }
      }
    }
  }
}

// A NaN of the element type (never for integers).
template <typename S>
bool isNanElement(S v, DataType type) {
  if (type == DataType::Float16) return isNanBits(static_cast<uint16_t>(v), kHalf);
  if (type == DataType::Bfloat16) return isNanBits(static_cast<uint16_t>(v), kBf16);
  if constexpr (std::is_floating_point_v<S>) return std::isnan(v);
  return false;
}

// Every kernel variant gives the same bits as the portable one: random bit patterns (NaNs, Infs, denormals)
// through every op and a division, at a length that exercises blocks and tails. Only a NaN's payload may differ
// (which input's NaN an instruction passes on depends on operand order, which the compiler may swap).
TYPED_TEST(ReduceTest, VariantsAgreeBitForBit) {
  using S = typename TypeParam::Ref::S;
  constexpr DataType type = TypeParam::type;
  std::mt19937_64 rng(static_cast<uint64_t>(type) * 1000 + 3);
  constexpr size_t n = 4099;
  std::vector<S> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t ra = rng(), rb = rng();
    std::memcpy(&a[i], &ra, sizeof(S));
    std::memcpy(&b[i], &rb, sizeof(S));
  }
  auto run = [&](KernelIsa isa, int what) {
    IsaScope scope(isa);
    std::vector<S> out(n);
    if (what < 5) {
      reduce(out.data(), a.data(), b.data(), n, type, kAllOps[what]);
    } else {
      out = a;
      divideInPlace(out.data(), n, type, 3);
    }
    return out;
  };
  for (int what = 0; what < 6; ++what) {
    const std::vector<S> portable = run(KernelIsa::Portable, what);
    for (base::KernelIsa isa : supportedIsas()) {
      const std::vector<S> other = run(isa, what);
      for (size_t i = 0; i < n; ++i) {
        if (isNanElement(portable[i], type)) {
          ASSERT_TRUE(isNanElement(other[i], type)) << kernelIsaName(isa) << " element " << i;
          continue;
        }
        ASSERT_EQ(std::memcmp(&portable[i], &other[i], sizeof(S)), 0)
            << kernelIsaName(isa) << " differs from portable in " << (what < 5 ? reduceOpName(kAllOps[what]) : "divide")
            << " at element " << i;
      }
    }
  }
}

// ---- Specific semantics ---------------------------------------------------------------------------------------

template <typename T>
T reduceOne(T a, T b, DataType type, ReduceOp op) {
  T r{};
  reduce(&r, &a, &b, 1, type, op);
  return r;
}

TEST(DataTypes, KernelIsa) {
  const std::vector<base::KernelIsa> isas = supportedIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), KernelIsa::Portable);
  EXPECT_EQ(base::kernelIsa(), isas.back()) << "the default is the best variant the CPU runs";
  EXPECT_STREQ(base::kernelIsaName(KernelIsa::Portable), "portable");
  EXPECT_STREQ(base::kernelIsaName(KernelIsa::X86V3), "x86-64-v3");
  EXPECT_FALSE(base::setKernelIsa(static_cast<base::KernelIsa>(7)));
  EXPECT_EQ(base::kernelIsa(), isas.back());
}

TEST(DataTypes, IntegerWrap) {
  EXPECT_EQ(reduceOne<int8_t>(127, 1, DataType::Int8, ReduceOp::Sum), -128);
  EXPECT_EQ(reduceOne<int8_t>(-128, -1, DataType::Int8, ReduceOp::Sum), 127);
  EXPECT_EQ(reduceOne<int8_t>(16, 16, DataType::Int8, ReduceOp::Prod), 0);
  EXPECT_EQ(reduceOne<int8_t>(-128, -1, DataType::Int8, ReduceOp::Prod), -128);
  EXPECT_EQ(reduceOne<uint8_t>(255, 2, DataType::Uint8, ReduceOp::Sum), 1);
  EXPECT_EQ(reduceOne<uint8_t>(255, 255, DataType::Uint8, ReduceOp::Prod), 1);
  EXPECT_EQ(reduceOne<int32_t>(INT32_MAX, 1, DataType::Int32, ReduceOp::Sum), INT32_MIN);
  EXPECT_EQ(reduceOne<int32_t>(INT32_MIN, -1, DataType::Int32, ReduceOp::Prod), INT32_MIN);
  EXPECT_EQ(reduceOne<int32_t>(65536, 65536, DataType::Int32, ReduceOp::Prod), 0);
  EXPECT_EQ(reduceOne<uint32_t>(UINT32_MAX, 1, DataType::Uint32, ReduceOp::Avg), 0u);
  EXPECT_EQ(reduceOne<int64_t>(INT64_MAX, 1, DataType::Int64, ReduceOp::Sum), INT64_MIN);
  EXPECT_EQ(reduceOne<int64_t>(INT64_MIN, -1, DataType::Int64, ReduceOp::Prod), INT64_MIN);
  EXPECT_EQ(reduceOne<uint64_t>(UINT64_MAX, UINT64_MAX, DataType::Uint64, ReduceOp::Prod), 1u);
  EXPECT_EQ(reduceOne<int64_t>(-5, 3, DataType::Int64, ReduceOp::Max), 3);
  EXPECT_EQ(reduceOne<uint64_t>(UINT64_MAX, 3, DataType::Uint64, ReduceOp::Min), 3u);
}

TEST(DataTypes, FloatMaxMinPropagateNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    EXPECT_TRUE(std::isnan(reduceOne(nan, 1.0f, DataType::Float32, op)));
    EXPECT_TRUE(std::isnan(reduceOne(1.0f, nan, DataType::Float32, op)));
    EXPECT_TRUE(std::isnan(reduceOne<double>(NAN, -INFINITY, DataType::Float64, op)));
    EXPECT_TRUE(isNanBits(reduceOne<uint16_t>(0x7E00, 0x3C00, DataType::Float16, op), kHalf));
    EXPECT_TRUE(isNanBits(reduceOne<uint16_t>(0x3F80, 0xFFC0, DataType::Bfloat16, op), kBf16));
  }
  EXPECT_EQ(reduceOne(-INFINITY, 2.0f, DataType::Float32, ReduceOp::Max), 2.0f);
  EXPECT_EQ(reduceOne(-INFINITY, 2.0f, DataType::Float32, ReduceOp::Min), -INFINITY);
}

// Direct and recursive-doubling AllReduce have two ranks each compute op(own, other's) and rely on getting the
// same bits: Max and Min must not depend on the operands' order, +0/-0 ties and NaN payloads included.
TEST(DataTypes, MaxMinGiveTheSameBitsEitherWayRound) {
  auto bitsOf = [](auto v) {
    std::vector<uint8_t> b(sizeof(v));
    std::memcpy(b.data(), &v, sizeof(v));
    return b;
  };
  std::vector<std::pair<DataType, std::vector<std::vector<uint8_t>>>> specials;
  {
    std::vector<std::vector<uint8_t>> f;
    for (uint32_t u : {0x00000000u, 0x80000000u, 0x3F800000u, 0xBF800000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                       0xFFC00000u, 0x7FC00001u, 0x7FA00000u, 0x40200000u})
      f.push_back(bitsOf(u));
    specials.push_back({DataType::Float32, f});
    std::vector<std::vector<uint8_t>> d;
    for (uint64_t u : {0x0ull, 0x8000000000000000ull, 0x3FF0000000000000ull, 0x7FF0000000000000ull,
                       0x7FF8000000000000ull, 0xFFF8000000000000ull, 0x7FF8000000000001ull, 0xC004000000000000ull})
      d.push_back(bitsOf(u));
    specials.push_back({DataType::Float64, d});
    std::vector<std::vector<uint8_t>> h, bf;
    for (uint16_t u : {0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7E01}) h.push_back(bitsOf(u));
    for (uint16_t u : {0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7FC1}) bf.push_back(bitsOf(u));
    specials.push_back({DataType::Float16, h});
    specials.push_back({DataType::Bfloat16, bf});
  }
  for (base::KernelIsa isa : supportedIsas()) {
    IsaScope scope(isa);
    for (const auto& [type, values] : specials) {
      const size_t width = dataTypeSize(type), n = values.size() * values.size();
      std::vector<uint8_t> a, b;  // every ordered pair, long enough for the vector loops
      for (const auto& x : values)
        for (const auto& y : values) {
          a.insert(a.end(), x.begin(), x.end());
          b.insert(b.end(), y.begin(), y.end());
        }
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
        std::vector<uint8_t> ab(a.size()), ba(a.size());
        reduce(ab.data(), a.data(), b.data(), n, type, op);
        reduce(ba.data(), b.data(), a.data(), n, type, op);
        for (size_t i = 0; i < n; ++i)
          EXPECT_EQ(0, std::memcmp(&ab[i * width], &ba[i * width], width))
              << base::kernelIsaName(isa) << " " << dataTypeName(type) << " " << reduceOpName(op) << " pair " << i;
      }
    }
  }
  EXPECT_FALSE(std::signbit(reduceOne(-0.0f, 0.0f, DataType::Float32, ReduceOp::Max)));
  EXPECT_TRUE(std::signbit(reduceOne(0.0f, -0.0f, DataType::Float32, ReduceOp::Min)));
}

TEST(DataTypes, HalfArithmeticRounds) {
  // 2048 + 1 is a tie between 2048 and 2050 in fp16: to even, 2048. 2048 + 3 -> 2052 (tie, to even).
  EXPECT_EQ(reduceOne<uint16_t>(base::floatToHalf(2048), base::floatToHalf(1), DataType::Float16, ReduceOp::Sum),
            0x6800);
  EXPECT_EQ(base::halfToFloat(
                reduceOne<uint16_t>(base::floatToHalf(2048), base::floatToHalf(3), DataType::Float16, ReduceOp::Sum)),
            2052.0f);
  // 65504 + 65504 overflows to Inf; 256 * 256 too.
  EXPECT_EQ(reduceOne<uint16_t>(0x7BFF, 0x7BFF, DataType::Float16, ReduceOp::Sum), 0x7C00);
  EXPECT_EQ(reduceOne<uint16_t>(base::floatToHalf(256), base::floatToHalf(256), DataType::Float16, ReduceOp::Prod),
            0x7C00);
  // Inf - Inf is NaN.
  EXPECT_TRUE(isNanBits(reduceOne<uint16_t>(0x7C00, 0xFC00, DataType::Float16, ReduceOp::Sum), kHalf));
  // bf16: 256 + 1 is a tie between 256 and 258: to even, 256.
  EXPECT_EQ(base::bf16ToFloat(
                reduceOne<uint16_t>(base::floatToBf16(256), base::floatToBf16(1), DataType::Bfloat16, ReduceOp::Sum)),
            256.0f);
}

TEST(DataTypes, DivideSemantics) {
  int32_t ints[] = {-7, 7, -1, INT32_MIN, INT32_MAX};
  base::divideInPlace(ints, 5, DataType::Int32, 2);
  EXPECT_EQ(ints[0], -3);
  EXPECT_EQ(ints[1], 3);
  EXPECT_EQ(ints[2], 0);
  EXPECT_EQ(ints[3], INT32_MIN / 2);
  EXPECT_EQ(ints[4], INT32_MAX / 2);
  uint64_t big[] = {UINT64_MAX};
  base::divideInPlace(big, 1, DataType::Uint64, 3);
  EXPECT_EQ(big[0], UINT64_MAX / 3);
  uint8_t bytes[] = {255, 9};
  base::divideInPlace(bytes, 2, DataType::Uint8, 300);
  EXPECT_EQ(bytes[0], 0);
  float f[] = {1.0f, 10.0f};
  base::divideInPlace(f, 2, DataType::Float32, 3);
  EXPECT_EQ(f[0], 1.0f / 3.0f);  // a true division, not a product with a rounded reciprocal
  EXPECT_EQ(f[1], 10.0f / 3.0f);
  uint16_t h[] = {base::floatToHalf(1.0f)};
  base::divideInPlace(h, 1, DataType::Float16, 3);
  EXPECT_EQ(h[0], refEncode(1.0 / 3.0, kHalf));
}

// scaleInto's multiplication by `factor`, one element of `type` (PreMulSum's scaling).
void multiplyInto(void* dst, const void* src, size_t count, DataType type, const void* factor) {
  base::InputScale scale{true, 1, 0};
  std::memcpy(&scale.factor, factor, std::max<size_t>(base::dataTypeSize(type), 1));
  base::scaleInto(dst, src, count, type, scale);
}

// PreMulSum's scaling: each element times the factor, as reduce() multiplies (every type, past the 4 KiB block of
// repeated factors scaleInto works in, in place and out of place).
TEST(DataTypes, MultiplySemantics) {
  for (size_t n : {size_t{1}, size_t{1023}, size_t{5000}}) {
    std::vector<int32_t> ints(n), out(n);
    for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int32_t>(i) - 500;
    const int32_t three = 3;
    multiplyInto(out.data(), ints.data(), n, DataType::Int32, &three);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], ints[i] * 3) << n << " elements, element " << i;
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i) d[i] = 0.1 * static_cast<double>(i);
    const double f = 1.0 / 3;
    std::vector<double> want = d;
    multiplyInto(d.data(), d.data(), n, DataType::Float64, &f);  // in place
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], want[i] * f) << n << " elements, element " << i;
  }
  uint8_t bytes[] = {200, 7};
  const uint8_t two = 2;
  multiplyInto(bytes, bytes, 2, DataType::Uint8, &two);
  EXPECT_EQ(bytes[0], 144);  // 400 wraps
  EXPECT_EQ(bytes[1], 14);
  int64_t big[] = {INT64_MAX};
  const int64_t minusOne = -1;
  multiplyInto(big, big, 1, DataType::Int64, &minusOne);
  EXPECT_EQ(big[0], -INT64_MAX);
  // fp16 through float, rounded once: 3 x 0.1 (as fp16) is rounded from the float product.
  const uint16_t tenth = base::floatToHalf(0.1f), h3 = base::floatToHalf(3.0f);
  uint16_t h[] = {h3, 0x7BFF};
  multiplyInto(h, h, 2, DataType::Float16, &tenth);
  EXPECT_EQ(h[0], refEncode(3.0 * static_cast<double>(base::halfToFloat(tenth)), kHalf));
  EXPECT_EQ(h[1], refEncode(65504.0 * static_cast<double>(base::halfToFloat(tenth)), kHalf));
  const uint16_t h2 = base::floatToHalf(2.0f);
  uint16_t inf = 0x7BFF;
  multiplyInto(&inf, &inf, 1, DataType::Float16, &h2);
  EXPECT_EQ(inf, 0x7C00);  // 65504 x 2 overflows fp16
  uint16_t b[] = {base::floatToBf16(3.0f)};
  const uint16_t bHalf = base::floatToBf16(0.5f);
  multiplyInto(b, b, 1, DataType::Bfloat16, &bHalf);
  EXPECT_EQ(base::bf16ToFloat(b[0]), 1.5f);
}

// reduceScaled (the executor's reduction of a scaled input, block by block) gives the bits of scaleInto then reduce,
// for every type and op, either operand order, a multiply and a divide, out of place and with dst aliasing either
// operand, over counts around its 4 KiB block. Random bytes: NaNs, infinities and subnormals included.
TEST(DataTypes, ReduceScaledIsScaleThenReduceBitForBit) {
  std::mt19937_64 rng(2026);
  for (DataType type : kAllTypes) {
    const size_t es = base::dataTypeSize(type);
    const bool floating = type == DataType::Float16 || type == DataType::Bfloat16 || type == DataType::Float32 ||
                          type == DataType::Float64;
    for (size_t n : {size_t{1}, 4096 / es - 1, 4096 / es, 4096 / es + 3, size_t{5000}}) {
      std::vector<uint8_t> a(n * es), b(n * es), factor(es);
      for (auto& x : a) x = static_cast<uint8_t>(rng());
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      for (auto& x : factor) x = static_cast<uint8_t>(rng());
      std::vector<base::InputScale> scales{{true, 1, 0}};
      std::memcpy(&scales[0].factor, factor.data(), es);
      if (floating) scales.push_back({false, 8, 0});
      for (const base::InputScale& scale : scales) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min}) {
          for (bool scaledSecond : {false, true}) {
            std::vector<uint8_t> want(n * es), scaled(n * es);
            base::scaleInto(scaled.data(), a.data(), n, type, scale);
            if (scaledSecond)
              reduce(want.data(), b.data(), scaled.data(), n, type, op);
            else
              reduce(want.data(), scaled.data(), b.data(), n, type, op);
            std::vector<uint8_t> out(n * es), inA = a, inB = b;
            base::reduceScaled(out.data(), a.data(), b.data(), n, type, op, scale, scaledSecond);
            base::reduceScaled(inA.data(), inA.data(), b.data(), n, type, op, scale, scaledSecond);
            base::reduceScaled(inB.data(), a.data(), inB.data(), n, type, op, scale, scaledSecond);
            const std::string what = std::string(dataTypeName(type)) + " " + reduceOpName(op) +
                                     " n=" + std::to_string(n) + (scale.multiply ? " multiply" : " divide") +
                                     (scaledSecond ? " scaled second" : "");
            EXPECT_EQ(out, want) << what;
            EXPECT_EQ(inA, want) << what << ", dst = a";
            EXPECT_EQ(inB, want) << what << ", dst = b";
          }
        }
      }
    }
  }
}

// Avg over floating types divides each input by a power of two (exact) and the sum by the rest of nranks; integer
// types divide the sum once. Where summing first does not overflow, the split division gives its bits (each partial
// sum is the unscaled one times a power of two); where it does (fp16 inputs of 30000 and up), the average is finite
// and within a few units in the last place.
TEST(DataTypes, AvgDivisorsSplitTheDivisionExactly) {
  EXPECT_EQ(base::avgDivisors(DataType::Int32, 6).input, 1);
  EXPECT_EQ(base::avgDivisors(DataType::Int32, 6).result, 6);
  EXPECT_EQ(base::avgDivisors(DataType::Float16, 1).input, 1);
  EXPECT_EQ(base::avgDivisors(DataType::Float16, 1).result, 1);
  EXPECT_EQ(base::avgDivisors(DataType::Float32, 4).input, 4);
  EXPECT_EQ(base::avgDivisors(DataType::Float32, 4).result, 1);
  EXPECT_EQ(base::avgDivisors(DataType::Bfloat16, 5).input, 8);
  EXPECT_EQ(base::avgDivisors(DataType::Bfloat16, 5).result, 5.0 / 8);
  EXPECT_EQ(base::avgDivisors(DataType::Float64, 131072).input, 131072);
  auto sum = [](std::vector<uint16_t> v) {
    for (size_t r = 1; r < v.size(); ++r) reduce(&v[0], &v[0], &v[r], 1, DataType::Float16, ReduceOp::Sum);
    return v[0];
  };
  for (int n : {2, 3, 5, 6, 7, 8}) {
    const base::AvgDivisors d = base::avgDivisors(DataType::Float16, n);
    for (float x : {1.0f, 3.0f, 1000.0f, 7001.0f, 30000.0f, 65504.0f}) {
      std::vector<uint16_t> raw(static_cast<size_t>(n)), scaled(raw.size());
      for (int r = 0; r < n; ++r) raw[static_cast<size_t>(r)] = base::floatToHalf(x + static_cast<float>(r));
      for (size_t r = 0; r < raw.size(); ++r) base::divideInto(&scaled[r], &raw[r], 1, DataType::Float16, d.input);
      uint16_t split = sum(scaled);
      base::divideInPlace(&split, 1, DataType::Float16, d.result);
      uint16_t once = sum(raw);
      base::divideInPlace(&once, 1, DataType::Float16, n);
      if (std::isfinite(base::halfToFloat(once))) {
        EXPECT_EQ(split, once) << n << " ranks of " << x;
      } else {
        EXPECT_NEAR(base::halfToFloat(split), x, x / 256) << n << " ranks of " << x;
      }
    }
  }
}

TEST(DataTypes, InvalidArgumentsThrow) {
  float x = 1;
  try {
    reduce(&x, &x, &x, 1, static_cast<DataType>(10), ReduceOp::Sum);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  try {
    reduce(&x, &x, &x, 1, DataType::Float32, static_cast<ReduceOp>(6));
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  EXPECT_THROW(base::divideInPlace(&x, 1, DataType::Float32, 0), Error);
  EXPECT_THROW(base::divideInPlace(&x, 1, DataType::Float32, -2), Error);
  EXPECT_THROW(base::divideInPlace(&x, 1, static_cast<DataType>(-1), 2), Error);
  EXPECT_THROW(multiplyInto(&x, &x, 1, static_cast<DataType>(10), &x), Error);
  reduce(nullptr, nullptr, nullptr, 0, DataType::Float32, ReduceOp::Sum);  // count 0: no access
  base::divideInPlace(nullptr, 0, DataType::Int8, 4);
}

}  // namespace
}  // namespace collie::base
