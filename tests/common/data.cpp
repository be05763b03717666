#include "common/data.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "base/datatypes.hpp"

namespace collie::test {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool isSigned(DataType t) { return t != DataType::Uint8 && t != DataType::Uint32 && t != DataType::Uint64; }

// Integer Avg exactly as src/core/datatypes.cpp divides: the wrapped sum in the storage type, divided by an int.
template <typename S>
double intAvg(int64_t sum, int nranks) {
  S s = static_cast<S>(sum);
  return static_cast<double>(static_cast<S>(s / nranks));
}

double avgOf(DataType type, int64_t sum, int nranks) {
  switch (type) {
    case DataType::Int8:
      return intAvg<int8_t>(sum, nranks);
    case DataType::Uint8:
      return intAvg<uint8_t>(sum, nranks);
    case DataType::Int32:
      return intAvg<int32_t>(sum, nranks);
    case DataType::Uint32:
      return intAvg<uint32_t>(sum, nranks);
    case DataType::Int64:
      return intAvg<int64_t>(sum, nranks);
    case DataType::Uint64:
      return intAvg<uint64_t>(sum, nranks);
    case DataType::Float64:
      return static_cast<double>(sum) / static_cast<double>(nranks);
    default:  // float32, and fp16/bf16 which divide in float and round once to the type (done by encode)
      return static_cast<double>(static_cast<float>(sum) / static_cast<float>(nranks));
  }
}

// The kPeriod-entry table of the elements expected from an index that is 0 mod kPeriod.
std::vector<uint8_t> inputTable(DataType type, ReduceOp op, int rank) {
  const size_t es = typeSize(type);
  std::vector<uint8_t> table(kPeriod * es);
  for (size_t i = 0; i < kPeriod; ++i)
    encode(table.data() + i * es, type, static_cast<double>(inputValue(type, op, rank, i)));
  return table;
}

std::vector<uint8_t> reducedTable(DataType type, ReduceOp op, int nranks) {
  const size_t es = typeSize(type);
  std::vector<uint8_t> table(kPeriod * es);
  for (size_t i = 0; i < kPeriod; ++i) {
    int64_t acc = inputValue(type, op, 0, i);
    for (int r = 1; r < nranks; ++r) {
      int64_t v = inputValue(type, op, r, i);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
        case ReduceOp::PreMulSum:  // as Sum: the input's scaling comes before the kernels
          acc += v;
          break;
        case ReduceOp::Prod:
          acc *= v;
          break;
        case ReduceOp::Max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::Min:
          acc = std::min(acc, v);
          break;
      }
    }
    double value = op == ReduceOp::Avg ? avgOf(type, acc, nranks) : static_cast<double>(acc);
    encode(table.data() + i * es, type, value);
  }
  return table;
}

/// Calls fn(i, idx, run) for consecutive runs of elements [i, i + run) of a buffer of n elements whose element i
/// is entry (firstIndex + i) % kPeriod of a table: entries [idx, idx + run), each run within one period (a copy or
/// compare per run, not per element). Stops at the first fn that returns false; returns whether none did.
template <typename Fn>
bool forEachRun(size_t n, size_t firstIndex, Fn fn) {
  for (size_t i = 0, idx = firstIndex % kPeriod; i < n; idx = 0) {
    const size_t run = std::min(n - i, kPeriod - idx);
    if (!fn(i, idx, run)) return false;
    i += run;
  }
  return true;
}

template <typename U>
::testing::AssertionResult compareTyped(const void* buf, size_t n, DataType type, const std::vector<uint8_t>& table,
                                        size_t firstIndex) {
  const auto* p = static_cast<const unsigned char*>(buf);
  const auto* t = reinterpret_cast<const unsigned char*>(table.data());
  if (forEachRun(n, firstIndex, [&](size_t i, size_t idx, size_t run) {
        return std::memcmp(p + i * sizeof(U), t + idx * sizeof(U), run * sizeof(U)) == 0;
      }))
    return ::testing::AssertionSuccess();  // else the element loop below says which differ
  size_t idx = firstIndex % kPeriod, bad = 0;
  std::string detail;
  for (size_t i = 0; i < n; ++i) {
    U got, want;
    memcpy(&got, p + i * sizeof(U), sizeof(U));
    memcpy(&want, t + idx * sizeof(U), sizeof(U));
    if (got != want) {
      if (bad < 5) {
        detail += "\n    [" + std::to_string(i) + "] expected " + show(&want, type) + ", got " + show(&got, type);
      }
      ++bad;
    }
    if (++idx == kPeriod) idx = 0;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " " << typeName(type)
                                       << " elements differ (first ones shown):" << detail;
}

::testing::AssertionResult compare(const void* buf, size_t n, DataType type, const std::vector<uint8_t>& table,
                                   size_t firstIndex) {
  switch (typeSize(type)) {
    case 1:
      return compareTyped<uint8_t>(buf, n, type, table, firstIndex);
    case 2:
      return compareTyped<uint16_t>(buf, n, type, table, firstIndex);
    case 4:
      return compareTyped<uint32_t>(buf, n, type, table, firstIndex);
    default:
      return compareTyped<uint64_t>(buf, n, type, table, firstIndex);
  }
}

::testing::AssertionResult sentinelBytes(const uint8_t* p, size_t bytes, const char* what) {
  // Every byte equals the first when the bytes equal themselves shifted by one (libc's memcmp, not a byte loop).
  if (bytes == 0 || (p[0] == kSentinelByte && std::memcmp(p, p + 1, bytes - 1) == 0))
    return ::testing::AssertionSuccess();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != kSentinelByte) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  char buf[160];
  snprintf(buf, sizeof buf, "%zu of %zu bytes of %s were overwritten (first at byte %zu: 0x%02x)", bad, bytes, what,
           first, p[first]);
  return ::testing::AssertionFailure() << buf;
}

// One element of type T at dst.
template <typename T>
void store(void* dst, T x) {
  memcpy(dst, &x, sizeof x);
}

}  // namespace

// Writes the exact value v (a small integer, or a quotient for Avg) as one element of `type` at dst.
void encode(void* dst, DataType type, double v) {
  const auto i = static_cast<int64_t>(v);  // integer types: through int64, so negatives wrap into unsigned ones
  switch (type) {
    case DataType::Int8:
      return store(dst, static_cast<int8_t>(i));
    case DataType::Uint8:
      return store(dst, static_cast<uint8_t>(i));
    case DataType::Int32:
      return store(dst, static_cast<int32_t>(i));
    case DataType::Uint32:
      return store(dst, static_cast<uint32_t>(i));
    case DataType::Int64:
      return store(dst, i);
    case DataType::Uint64:
      return store(dst, static_cast<uint64_t>(i));
    case DataType::Float16:
      return store(dst, base::floatToHalf(static_cast<float>(v)));
    case DataType::Float32:
      return store(dst, static_cast<float>(v));
    case DataType::Float64:
      return store(dst, v);
    case DataType::Bfloat16:
      return store(dst, base::floatToBf16(static_cast<float>(v)));
  }
}

// One element as text: its value and its bits.
std::string show(const void* src, DataType type) {
  char buf[96];
  switch (type) {
    case DataType::Int8: {
      int8_t x;
      memcpy(&x, src, 1);
      snprintf(buf, sizeof buf, "%d (0x%02x)", x, static_cast<uint8_t>(x));
      break;
    }
    case DataType::Uint8: {
      uint8_t x;
      memcpy(&x, src, 1);
      snprintf(buf, sizeof buf, "%u (0x%02x)", x, x);
      break;
    }
    case DataType::Int32:
    case DataType::Uint32: {
      uint32_t x;
      memcpy(&x, src, 4);
      if (type == DataType::Int32)
        snprintf(buf, sizeof buf, "%d (0x%08x)", static_cast<int32_t>(x), x);
      else
        snprintf(buf, sizeof buf, "%u (0x%08x)", x, x);
      break;
    }
    case DataType::Int64:
    case DataType::Uint64: {
      uint64_t x;
      memcpy(&x, src, 8);
      if (type == DataType::Int64)
        snprintf(buf, sizeof buf, "%" PRId64 " (0x%016" PRIx64 ")", static_cast<int64_t>(x), x);
      else
        snprintf(buf, sizeof buf, "%" PRIu64 " (0x%016" PRIx64 ")", x, x);
      break;
    }
    case DataType::Float16:
    case DataType::Bfloat16: {
      uint16_t x;
      memcpy(&x, src, 2);
      float f = type == DataType::Float16 ? base::halfToFloat(x) : base::bf16ToFloat(x);
      snprintf(buf, sizeof buf, "%g (0x%04x)", static_cast<double>(f), x);
      break;
    }
    case DataType::Float32: {
      float f;
      uint32_t x;
      memcpy(&f, src, 4);
      memcpy(&x, src, 4);
      snprintf(buf, sizeof buf, "%.9g (0x%08x)", static_cast<double>(f), x);
      break;
    }
    case DataType::Float64: {
      double f;
      uint64_t x;
      memcpy(&f, src, 8);
      memcpy(&x, src, 8);
      snprintf(buf, sizeof buf, "%.17g (0x%016" PRIx64 ")", f, x);
      break;
    }
    default:
      snprintf(buf, sizeof buf, "?");
  }
  return buf;
}

std::string typeName(DataType type) { return base::dataTypeName(type); }
std::string opName(ReduceOp op) { return op == kNoReduction ? "none" : base::reduceOpName(op); }
size_t typeSize(DataType type) { return base::dataTypeSize(type); }

int64_t inputValue(DataType type, ReduceOp op, int rank, size_t i) {
  const uint64_t h = mix((static_cast<uint64_t>(rank) << 32) ^ (i % kPeriod) ^ 0x5eed0000000000ull);
  const bool sign = isSigned(type);
  if (op == ReduceOp::Prod) {
    if (sign && h % 7 == 0) return -1;
    if (rank < 6 && (h >> 8) % 3 == 0) return 2;
    return 1;
  }
  if (op == kNoReduction) {
    if (!sign) return 1 + static_cast<int64_t>((h >> 16) % 200);
    int64_t v = 1 + static_cast<int64_t>((h >> 16) % 100);
    return ((h >> 40) & 1) ? -v : v;
  }
  int64_t v = 1 + static_cast<int64_t>((h >> 16) % 5);
  return (sign && ((h >> 40) & 1)) ? -v : v;
}

Buffer::Buffer(DataType type, size_t count)
    : type_(type), count_(count), storage_(2 * kGuardBytes + count * typeSize(type), kSentinelByte) {}

void Buffer::fillInput(size_t begin, size_t n, ReduceOp op, int rank, size_t firstIndex) {
  const size_t es = typeSize(type_);
  std::vector<uint8_t> table = inputTable(type_, op, rank);
  char* dst = at(begin);
  forEachRun(n, firstIndex, [&](size_t i, size_t idx, size_t run) {
    memcpy(dst + i * es, table.data() + idx * es, run * es);
    return true;
  });
}

void Buffer::fillSentinel(size_t begin, size_t n) { memset(at(begin), kSentinelByte, n * typeSize(type_)); }

::testing::AssertionResult Buffer::guardsIntact() const {
  auto front = sentinelBytes(storage_.data(), kGuardBytes, "the guard zone before the buffer");
  if (!front) return front;
  return sentinelBytes(storage_.data() + kGuardBytes + count_ * typeSize(type_), kGuardBytes,
                       "the guard zone after the buffer");
}

::testing::AssertionResult matchesInput(const void* buf, size_t n, DataType type, ReduceOp op, int rank,
                                        size_t firstIndex) {
  return compare(buf, n, type, inputTable(type, op, rank), firstIndex);
}

::testing::AssertionResult matchesReduced(const void* buf, size_t n, DataType type, ReduceOp op, int nranks,
                                          size_t firstIndex) {
  return compare(buf, n, type, reducedTable(type, op, nranks), firstIndex);
}

::testing::AssertionResult isSentinel(const void* buf, size_t n, DataType type) {
  return sentinelBytes(static_cast<const uint8_t*>(buf), n * typeSize(type), "a region the call must not write");
}

}  // namespace collie::test
