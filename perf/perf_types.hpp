/*
 * perf_types.hpp: element types for the perf tools' data check: host-side half and bfloat16 (round to nearest
 * even, as the hardware converts), conversions to and from double, a dispatch from collieDataType_t to the host
 * type, and the nccl-tests names of the types (-d) and ops (-o).
 */
#ifndef COLLIE_PERF_PERF_TYPES_HPP_
#define COLLIE_PERF_PERF_TYPES_HPP_

#include <collie/collie.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace collie_perf {

// ---- Storage types ---------------------------------------------------

struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

inline uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u);  // inf, nan
  if (a >= 0x477ff000u) return sign | 0x7c00u;                                    // >= 65520 rounds to inf
  if (a < 0x38800000u) {                                                          // below 2^-14: subnormal
    float af;
    std::memcpy(&af, &a, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(af * 16777216.0f));  // units of 2^-24, to nearest even
  }
  uint32_t h = ((((a >> 23) - 127 + 15) << 10) | ((a & 0x7fffffu) >> 13));
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // round to nearest even; carries into the exponent
  return static_cast<uint16_t>(sign | h);
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else {
    const uint32_t bits = exp == 31 ? (0x7f800000u | (mant << 13)) : (((exp - 15 + 127) << 23) | (mant << 13));
    std::memcpy(&v, &bits, 4);
  }
  return (h & 0x8000u) ? -v : v;
}

inline uint16_t FloatToBf16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &x, 4);
  return v;
}

template <typename T>
inline double ToDouble(T v) {
  return static_cast<double>(v);
}
inline double ToDouble(Half v) { return HalfBitsToFloat(v.bits); }
inline double ToDouble(Bf16 v) { return Bf16BitsToFloat(v.bits); }

template <typename T>
inline T FromDouble(double d) {
  return static_cast<T>(d);
}
template <>
inline Half FromDouble<Half>(double d) {
  return Half{FloatToHalfBits(static_cast<float>(d))};
}
template <>
inline Bf16 FromDouble<Bf16>(double d) {
  return Bf16{FloatToBf16Bits(static_cast<float>(d))};
}

/** Calls f(T{}) with the host type T that stores `type`. */
template <typename F>
void Dispatch(collieDataType_t type, F&& f) {
  switch (type) {
    case collieInt8:
      f(int8_t{});
      break;
    case collieUint8:
      f(uint8_t{});
      break;
    case collieInt32:
      f(int32_t{});
      break;
    case collieUint32:
      f(uint32_t{});
      break;
    case collieInt64:
      f(int64_t{});
      break;
    case collieUint64:
      f(uint64_t{});
      break;
    case collieFloat16:
      f(Half{});
      break;
    case collieFloat32:
      f(float{});
      break;
    case collieFloat64:
      f(double{});
      break;
    case collieBfloat16:
      f(Bf16{});
      break;
    default:
      break;
  }
}

struct TypeInfo {
  const char* name;
  collieDataType_t type;
  size_t size;
  double avgTolerance;  // relative tolerance of an avg result; 0: exact
};
// nccl-tests' order and names.
inline constexpr TypeInfo kTypes[] = {{"int8", collieInt8, 1, 0},          {"uint8", collieUint8, 1, 0},
                                      {"int32", collieInt32, 4, 0},        {"uint32", collieUint32, 4, 0},
                                      {"int64", collieInt64, 8, 0},        {"uint64", collieUint64, 8, 0},
                                      {"half", collieFloat16, 2, 1e-2},    {"float", collieFloat32, 4, 1e-5},
                                      {"double", collieFloat64, 8, 1e-12}, {"bfloat16", collieBfloat16, 2, 3e-2}};
struct Alias {
  const char* alias;
  const char* name;
};
inline constexpr Alias kTypeAliases[] = {{"float16", "half"},  {"float32", "float"}, {"float64", "double"},
                                         {"bf16", "bfloat16"}, {"char", "int8"},     {"int", "int32"}};

struct OpInfo {
  const char* name;
  collieRedOp_t op;
};
/// "premulsum" (as in nccl-tests): each sweep makes a collieRedOpCreatePreMulSum op of its type whose factor on rank
/// r is PreMulFactor(r); collieNumOps stands for it here.
inline constexpr collieRedOp_t kPreMulSum = collieNumOps;
inline constexpr OpInfo kOps[] = {{"sum", collieSum}, {"prod", collieProd}, {"max", collieMax},
                                  {"min", collieMin}, {"avg", collieAvg},   {"premulsum", kPreMulSum}};
inline double PreMulFactor(int rank) { return 1 + rank % 2; }

}  // namespace collie_perf

#endif  // COLLIE_PERF_PERF_TYPES_HPP_
