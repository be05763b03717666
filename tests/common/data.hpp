// Exact test data for every element type and reduction.
//
// Inputs are small integers, so every sum, product, max and min over up to 8 ranks is exactly representable in
// every type (int8 and fp16/bf16 included) and the order in which an algorithm combines them cannot matter:
//   Sum, Max, Min, Avg: +-1..5 (1..5 for unsigned types)       |sum| <= 40
//   Prod:               1 or 2 (2 only on ranks 0..5), -1 for signed types   |prod| <= 64
//   no reduction:       +-1..100 (1..200 for unsigned types): more distinct values, all exact in int8 and bf16
// The value of element i of rank r depends on (r, i mod kPeriod) through a hash, so a result table of kPeriod
// entries holds every expected element and checking a million elements is a table lookup each. kPeriod is a
// prime, so an element shifted by a slice, chunk or block size is caught.
// Expected results are computed on the host the way the library defines them (src/base/datatypes.hpp): integer
// Sum/Prod wrap, Avg is the sum divided by nranks (truncating for integers; for floating types a float (double
// for float64) division rounded to the type).
// Buffers carry guard zones before and after the elements, filled with a sentinel byte; parts of a buffer that
// a call must not write are filled with the sentinel too and checked afterwards.
#pragma once

#include <gtest/gtest.h>

#include <collie/collie.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace collie::test {

inline constexpr size_t kPeriod = 1031;
inline constexpr uint8_t kSentinelByte = 0xA5;
inline constexpr size_t kGuardBytes = 64;

inline const std::vector<DataType> kAllTypes = {
    DataType::Int8,   DataType::Uint8,   DataType::Int32,   DataType::Uint32,  DataType::Int64,
    DataType::Uint64, DataType::Float16, DataType::Float32, DataType::Float64, DataType::Bfloat16};
inline const std::vector<ReduceOp> kAllOps = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min,
                                              ReduceOp::Avg};

std::string typeName(DataType type);
std::string opName(ReduceOp op);
size_t typeSize(DataType type);

/// Pass as `op` for the inputs of calls that do not reduce (Broadcast, AllGather, AllToAll, Send/Recv).
inline constexpr ReduceOp kNoReduction = static_cast<ReduceOp>(-1);

/// Writes v as one element of `type` at dst (integers truncated, floating types rounded to nearest).
void encode(void* dst, DataType type, double v);
/// One element of `type` at src as text: its value and its bits.
std::string show(const void* src, DataType type);

/// The input of `rank` at global element index i, for reduction `op` (or kNoReduction).
int64_t inputValue(DataType type, ReduceOp op, int rank, size_t i);

/// A host buffer of `count` elements between two guard zones; everything starts as the sentinel byte.
class Buffer {
 public:
  Buffer(DataType type, size_t count);
  void* data() { return storage_.data() + kGuardBytes; }
  const void* data() const { return storage_.data() + kGuardBytes; }
  /// The address of element i (i may equal count).
  char* at(size_t i) { return static_cast<char*>(data()) + i * typeSize(type_); }
  size_t count() const { return count_; }
  DataType type() const { return type_; }
  /// Elements [begin, begin+n) := inputValue(type, op, rank, firstIndex + k).
  void fillInput(size_t begin, size_t n, ReduceOp op, int rank, size_t firstIndex);
  /// Elements [begin, begin+n) := sentinel bytes.
  void fillSentinel(size_t begin, size_t n);
  /// Both guard zones still hold the sentinel.
  ::testing::AssertionResult guardsIntact() const;

 private:
  DataType type_;
  size_t count_;
  std::vector<uint8_t> storage_;
};

/// Element i of buf[0, n) equals inputValue(type, op, rank, firstIndex + i).
::testing::AssertionResult matchesInput(const void* buf, size_t n, DataType type, ReduceOp op, int rank,
                                        size_t firstIndex);
/// Element i of buf[0, n) equals the reduction with `op` over ranks 0..nranks-1 of their inputs at index
/// firstIndex + i (Avg divided as the library divides).
::testing::AssertionResult matchesReduced(const void* buf, size_t n, DataType type, ReduceOp op, int nranks,
                                          size_t firstIndex);
/// Every byte of buf[0, n elements) is the sentinel.
::testing::AssertionResult isSentinel(const void* buf, size_t n, DataType type);

}  // namespace collie::test
