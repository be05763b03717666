// The checks every collective test relies on (tests/common/data.hpp) fail when they should: a wrong element
// anywhere (at a period's wrap too), an overwritten sentinel byte (first, middle, last), a written guard zone. They
// compare and fill period by period; a bug there would pass every collective test, so it is checked here.
#include <gtest/gtest.h>

#include <cstring>

#include "common/data.hpp"

namespace collie::test {
namespace {

constexpr size_t kCount = 3 * kPeriod + 5;
constexpr size_t kFirst = 17;  // the buffer's element 0 is input index 17: runs start mid-period

TEST(DataChecks, FilledInputMatchesAndEveryWrongElementIsFound) {
  for (DataType type : {DataType::Int8, DataType::Float16, DataType::Int32, DataType::Float64}) {
    SCOPED_TRACE(typeName(type));
    Buffer buf(type, kCount);
    buf.fillInput(0, kCount, ReduceOp::Sum, 2, kFirst);
    ASSERT_TRUE(matchesInput(buf.data(), kCount, type, ReduceOp::Sum, 2, kFirst));
    // Element by element, as the checks' old loop did: the same values.
    for (size_t i : {size_t{0}, kPeriod - kFirst - 1, kPeriod - kFirst, kCount - 1})
      EXPECT_TRUE(matchesInput(buf.at(i), 1, type, ReduceOp::Sum, 2, kFirst + i)) << i;
    EXPECT_FALSE(matchesInput(buf.data(), kCount, type, ReduceOp::Sum, 3, kFirst)) << "another rank's input";
    EXPECT_FALSE(matchesInput(buf.data(), kCount, type, ReduceOp::Sum, 2, kFirst + 1)) << "shifted by one";
    // One rank's reduction is its input.
    Buffer one(type, kCount);
    one.fillInput(0, kCount, ReduceOp::Sum, 0, kFirst);
    EXPECT_TRUE(matchesReduced(one.data(), kCount, type, ReduceOp::Sum, 1, kFirst));
    for (size_t i : {size_t{0}, kPeriod - kFirst - 1, kPeriod - kFirst, kCount - 1}) {
      unsigned char* byte = reinterpret_cast<unsigned char*>(buf.at(i));
      *byte ^= 0x40;
      auto r = matchesInput(buf.data(), kCount, type, ReduceOp::Sum, 2, kFirst);
      EXPECT_FALSE(r) << "element " << i << " changed";
      EXPECT_NE(std::string(r.message()).find("[" + std::to_string(i) + "]"), std::string::npos) << r.message();
      *byte ^= 0x40;
    }
    EXPECT_TRUE(matchesInput(buf.data(), kCount, type, ReduceOp::Sum, 2, kFirst));
  }
}

TEST(DataChecks, EveryOverwrittenSentinelByteAndGuardIsFound) {
  Buffer buf(DataType::Int32, kCount);
  buf.fillSentinel(0, kCount);
  ASSERT_TRUE(isSentinel(buf.data(), kCount, DataType::Int32));
  ASSERT_TRUE(buf.guardsIntact());
  for (size_t byte : {size_t{0}, size_t{1}, 4 * kCount / 2, 4 * kCount - 1}) {
    unsigned char* p = static_cast<unsigned char*>(buf.data()) + byte;
    *p = 0;
    EXPECT_FALSE(isSentinel(buf.data(), kCount, DataType::Int32)) << "byte " << byte << " overwritten";
    *p = kSentinelByte;
  }
  EXPECT_TRUE(isSentinel(buf.data(), kCount, DataType::Int32));
  *(static_cast<unsigned char*>(buf.data()) - 1) = 0;
  EXPECT_FALSE(buf.guardsIntact()) << "the byte before the buffer";
  *(static_cast<unsigned char*>(buf.data()) - 1) = kSentinelByte;
  *buf.at(kCount) = 0;
  EXPECT_FALSE(buf.guardsIntact()) << "the byte after the buffer";
}

}  // namespace
}  // namespace collie::test
