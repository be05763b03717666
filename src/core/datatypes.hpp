// Element types and reduction operations: sizes, names, validation, and the host reduction kernels.
#pragma once

#include <collie/collie.hpp>

#include <cstddef>
#include <cstdint>

namespace collie::core {

/// Bytes per element; 0 for a value outside the enum.
size_t dataTypeSize(DataType type);
const char* dataTypeName(DataType type);  ///< "float32", ...
const char* reduceOpName(ReduceOp op);    ///< "sum", ...
bool isValidDataType(int type);
bool isValidReduceOp(int op);

/// fp16 / bf16 <-> float, round-to-nearest-even.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);

/// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly. Avg reduces as Sum (the division is
/// applied once at the end by divideInPlace). fp16/bf16 reduce through float, rounding each result.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op);

/// buf[i] = buf[i] / divisor (integer types: truncating division), for ReduceOp::Avg.
void divideInPlace(void* buf, size_t count, DataType type, int divisor);

}  // namespace collie::core
