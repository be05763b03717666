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
const char* reduceOpName(ReduceOp op);  ///< "sum", "prod", "max", "min", "avg" ("invalid" outside the enum)
bool isValidDataType(int type);         ///< 0..9
bool isValidReduceOp(int op);           ///< 0..4

/// Parses a type name, case-insensitively: dataTypeName or dataTypeShortName forms, plus "fp16", "fp32",
/// "fp64", "bf16" and "char". Returns false (leaving *type alone) for anything else.
bool parseDataType(const std::string& name, DataType* type);
/// Parses "sum", "prod", "max", "min" or "avg", case-insensitively. Returns false (leaving *op alone) otherwise.
bool parseReduceOp(const std::string& name, ReduceOp* op);

/// fp16 / bf16 <-> float, round-to-nearest-even.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);

/// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly (never partially). Avg reduces as Sum (the
/// division is applied once at the end by divideInPlace). fp16/bf16 reduce through float, rounding each result
/// to nearest-even. Integer Sum and Prod wrap around. Floating-point Max and Min propagate NaN: a NaN in
/// either input gives a NaN. Throws InvalidArgument for a type or op outside the enums.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op);

/// buf[i] = buf[i] / divisor, for ReduceOp::Avg: true division for floating-point types (fp16/bf16 through
/// float, rounded to nearest-even), truncating division for integer types. Throws InvalidArgument unless
/// divisor > 0 and the type is valid.
void divideInPlace(void* buf, size_t count, DataType type, int divisor);

/// The instruction sets the host kernels of reduce() and divideInPlace() are built for. Portable: the baseline
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
