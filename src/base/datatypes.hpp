// Element types and reduction operations: sizes, names, validation, and the host reduction kernels.
#pragma once

#include <collie/collie.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

namespace collie::base {

/// Bytes per element; 0 for a value outside the enum.
size_t dataTypeSize(DataType type);
const char* dataTypeName(DataType type);  ///< "float32", ... ("invalid" outside the enum)
/// The nccl-tests name of a type: "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float",
/// "double", "bfloat16" ("invalid" outside the enum).
const char* dataTypeShortName(DataType type);
const char* reduceOpName(ReduceOp op);  ///< "sum", "prod", "max", "min", "avg", "premulsum" ("invalid" outside)
bool isValidDataType(int type);         ///< 0..9
bool isValidReduceOp(int op);           ///< 0..5 (PreMulSum included)

/// Parses a type name, case-insensitively: dataTypeName or dataTypeShortName forms, plus "fp16", "fp32",
/// "fp64", "bf16" and "char". Returns false (leaving *type alone) for anything else.
bool parseDataType(const std::string& name, DataType* type);
/// Parses "sum", "prod", "max", "min" or "avg", case-insensitively (not "premulsum": it needs a factor). Returns
/// false (leaving *op alone) otherwise.
bool parseReduceOp(const std::string& name, ReduceOp* op);

/// fp16 / bf16 <-> float, round-to-nearest-even.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);

/// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly (never partially). Avg and PreMulSum reduce as Sum
/// (see AvgDivisors for the divisions around it). fp16/bf16 reduce through float, rounding each result to nearest-even.
/// Integer Sum and Prod wrap around. Floating-point Max and Min propagate NaN: a NaN in either input gives a NaN.
/// Throws InvalidArgument for a type or op outside the enums.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op);

/// How a ReduceOp::Avg over `nranks` ranks divides: each rank's input by `input` before it is summed, the sum by
/// `result`. Integer types: 1 and nranks (the wrapped sum divided once, truncating, as NCCL's). Floating types:
/// 2^ceil(log2 nranks) and nranks / 2^ceil(log2 nranks). Scaling by a power of two is exact (outside the subnormal
/// range), so each partial sum is the unscaled one times that power and the result has the bits of summing first
/// and dividing once, wherever that does not overflow; and no partial sum exceeds the largest input in magnitude,
/// so fp16 gradients averaged over many ranks do not overflow (NCCL multiplies each input by 1/nranks for the same
/// reason, rounding every input once). The cost is fp16's: an input below 2^-14 x 2^ceil(log2 nranks) becomes
/// subnormal when divided and loses bits (NCCL's fp16 Avg loses them too).
struct AvgDivisors {
  double input = 1;
  double result = 1;
};
AvgDivisors avgDivisors(DataType type, int nranks);

/// dst[i] = src[i] / divisor (dst may be src): true division for floating-point types (fp16/bf16 through float,
/// rounded to nearest-even), truncating division for integer types, whose divisor must be a whole number. Throws
/// InvalidArgument unless divisor > 0 and the type is valid.
void divideInto(void* dst, const void* src, size_t count, DataType type, double divisor);
/// How a reduction scales each rank's input before combining it: ReduceOp::Avg divides it (AvgDivisors::input),
/// PreMulSum multiplies it by this rank's factor (its bits: one element of the call's type).
struct InputScale {
  bool multiply = false;
  double divisor = 1;
  uint64_t factor = 0;
};
/// dst[i] = scale(src[i]) (dst may be src): divideInto, or a multiplication as reduce() multiplies (fp16/bf16
/// through float, rounded once; integers wrap).
void scaleInto(void* dst, const void* src, size_t count, DataType type, const InputScale& scale);
/// dst[i] = scale(a[i]) op b[i], or b[i] op scale(a[i]) when scaledSecond: the bits of scaleInto then reduce(), done
/// block by block through a buffer that stays in L1 (no pass over the whole input). dst may alias a or b exactly.
void reduceScaled(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                  const InputScale& scale, bool scaledSecond);
inline void divideInPlace(void* buf, size_t count, DataType type, double divisor) {
  divideInto(buf, buf, count, type, divisor);
}

/// The instruction sets the host kernels of reduce() and divideInto() are built for. Portable: the baseline
/// the library is compiled for (SSE2 on x86-64). X86V3: x86-64-v3 (AVX2, FMA, F16C), x86-64 GCC builds only.
/// All give bit-identical results except for NaN payloads.
enum class KernelIsa : int { Portable = 0, X86V3 = 1 };
/// The kernels in use: the best this build and CPU support, unless setKernelIsa picked others.
KernelIsa kernelIsa();
/// Switches the kernels for the whole process (tests and benchmarks compare them). Returns false, changing
/// nothing, when this build or CPU cannot run isa.
bool setKernelIsa(KernelIsa isa);
const char* kernelIsaName(KernelIsa isa);  ///< "portable", "x86-64-v3"

}  // namespace collie::base
