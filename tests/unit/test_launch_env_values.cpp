// The launchers' integer variables (COLLIE_RANK/COLLIE_NRANKS, RANK/WORLD_SIZE, ..., MASTER_PORT) are checked
// before init does anything: a value past an int's range used to be truncated (COLLIE_NRANKS=4294967297 made a
// 1-rank job) and MASTER_PORT=2147483647 overflowed the +1 that gives the bootstrap port. Each must fail at once
// with InvalidArgument naming the variable, its value and the range. (Found reviewing the parsers for fuzzing.)
#include <gtest/gtest.h>

#include <collie/collie.hpp>
#include <string>

#include "common/scoped_env.hpp"

namespace collie {
namespace {

using test::ScopedEnv;

/// The message createFromEnv fails with, checked to be InvalidArgument ("" if it did not fail).
std::string initFailure() {
  try {
    Communicator::createFromEnv();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(LaunchEnvValues, RankAndSizePastAnIntAreRefusedNotTruncated) {
  {
    ScopedEnv rank("COLLIE_RANK", "0"), size("COLLIE_NRANKS", "4294967297");
    EXPECT_NE(initFailure().find("COLLIE_NRANKS='4294967297' is not an integer in [1, 2147483647]"), std::string::npos);
  }
  {
    ScopedEnv rank("COLLIE_RANK", "4294967296"), size("COLLIE_NRANKS", "2");
    EXPECT_NE(initFailure().find("COLLIE_RANK='4294967296' is not an integer in [0, 2147483646]"), std::string::npos);
  }
  {
    ScopedEnv rank("RANK", "99999999999999999999999"), size("WORLD_SIZE", "2");
    EXPECT_NE(initFailure().find("RANK='99999999999999999999999'"), std::string::npos);
  }
  {
    ScopedEnv rank("COLLIE_RANK", "-1"), size("COLLIE_NRANKS", "2");
    EXPECT_NE(initFailure().find("COLLIE_RANK='-1'"), std::string::npos);
  }
}

TEST(LaunchEnvValues, MasterPortMustLeaveRoomForTheBootstrapPort) {
  ScopedEnv rank("RANK", "1"), size("WORLD_SIZE", "2"), addr("MASTER_ADDR", "127.0.0.1");
  for (const char* port : {"2147483647", "65535", "-1", "x"}) {
    ScopedEnv p("MASTER_PORT", port);
    EXPECT_NE(initFailure().find(std::string("MASTER_PORT='") + port + "' is not an integer in [0, 65534]"),
              std::string::npos)
        << port;
  }
}

}  // namespace
}  // namespace collie
