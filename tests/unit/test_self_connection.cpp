// The self connection: sends meet receives in posting order, by copy; sizes must match.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "transport/transport.hpp"

namespace collie::transport {
namespace {

TEST(SelfConnection, MatchesInOrder) {
  auto conn = makeSelfConnection(3);
  EXPECT_EQ(conn->peer(), 3);
  std::vector<std::string> src = {"first", "", "third message"};
  std::vector<std::string> dst = {"xxxxx", "", "xxxxxxxxxxxxx"};
  std::vector<Transfer> sends(3), recvs(3);
  for (int i = 0; i < 3; ++i) {
    sends[i] = Transfer{src[i].data(), src[i].size()};
    recvs[i] = Transfer{dst[i].data(), dst[i].size()};
  }
  conn->postRecv(&recvs[0]);
  conn->postRecv(&recvs[1]);
  conn->postSend(&sends[0]);
  EXPECT_TRUE(conn->busy());
  EXPECT_TRUE(conn->progress());
  EXPECT_TRUE(sends[0].complete && recvs[0].complete);
  EXPECT_FALSE(recvs[1].complete);
  conn->postSend(&sends[1]);
  conn->postSend(&sends[2]);
  conn->postRecv(&recvs[2]);
  EXPECT_TRUE(conn->progress());
  EXPECT_FALSE(conn->busy());
  EXPECT_FALSE(conn->progress());
  EXPECT_EQ(dst, src);
  conn->close();
  conn->close();
}

TEST(SelfConnection, SizeMismatchNamesBothSizes) {
  auto conn = makeSelfConnection(0);
  char a[8] = {0}, b[16] = {0};
  Transfer s{a, sizeof(a)}, r{b, sizeof(b)};
  conn->postSend(&s);
  conn->postRecv(&r);
  try {
    conn->progress();
    FAIL() << "expected a size mismatch";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InternalError);
    EXPECT_NE(std::string(e.what()).find("8 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collie::transport
