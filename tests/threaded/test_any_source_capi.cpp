// Receive from any source through the C API (collieRecvAny, collieRecv with COLLIE_ANY_SOURCE), ranks as threads of
// one process (collieCommInitAll): the source reported and the data element by element; bad arguments and uses
// refused with the right code, leaving the communicator usable. The multi-process cases (several senders, order,
// timeout, a killed sender, mismatched sizes) are in tests/multiproc/test_any_source_proc.cpp.
#include <collie/collie.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

#define EXPECT_OK(call) EXPECT_EQ((call), collieSuccess) << #call << ": " << collieGetLastError(nullptr)

TEST(AnySourceCApi, RecvAnyReportsEachSenderAndItsData) {
  // A receive from any rank needs every peer connected: the C API's communicators connect eagerly only with
  // COLLIE_CONNECT=eager, a parameter read once per process, so the test runs in a child that has it.
  const char* mode = std::getenv("COLLIE_CONNECT");
  if (mode == nullptr || std::string(mode) != "eager") {
    const int status = rerunCurrentTestWith({"COLLIE_CONNECT=eager"});
    ASSERT_TRUE(WIFEXITED(status)) << "the child run with COLLIE_CONNECT=eager did not exit (status " << status << ")";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run with COLLIE_CONNECT=eager failed (its output is above)";
    return;
  }
  constexpr int n = 3;
  constexpr size_t count = 1000;
  onCApiThreads(n, [&](int r, collieComm_t comm) {
    std::vector<int32_t> buf(count);
    if (r != 0) {
      for (size_t j = 0; j < count; ++j) buf[j] = r * 1000000 + static_cast<int32_t>(j);
      EXPECT_OK(collieSend(buf.data(), count, collieInt32, 0, comm, nullptr));
      EXPECT_OK(collieSend(buf.data(), count, collieInt32, 0, comm, nullptr));
      return;
    }
    std::vector<int> seen(n, 0);
    for (int k = 0; k < 2 * (n - 1); ++k) {
      std::fill(buf.begin(), buf.end(), -1);
      int source = -7;
      if (k % 2 == 0) {
        EXPECT_OK(collieRecvAny(buf.data(), count, collieInt32, &source, comm));
      } else {  // the plain receive takes COLLIE_ANY_SOURCE too; the data tell the sender
        EXPECT_OK(collieRecv(buf.data(), count, collieInt32, COLLIE_ANY_SOURCE, comm, nullptr));
        source = buf[0] / 1000000;
      }
      ASSERT_TRUE(source >= 1 && source < n) << source;
      ++seen[static_cast<size_t>(source)];
      for (size_t j = 0; j < count; ++j)
        ASSERT_EQ(buf[j], source * 1000000 + static_cast<int32_t>(j)) << "element " << j << " from " << source;
    }
    for (int p = 1; p < n; ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], 2) << "from rank " << p;
  });
}

TEST(AnySourceCApi, BadArgumentsAndUsesAreRefused) {
  constexpr int n = 2;
  onCApiThreads(n, [&](int r, collieComm_t comm) {
    float buf[4] = {1, 2, 3, 4};
    if (r == 1) {
      EXPECT_OK(collieSend(buf, 4, collieFloat32, 0, comm, nullptr));
      return;
    }
    int source = 5;
    EXPECT_EQ(collieRecvAny(buf, 4, collieFloat32, nullptr, comm), collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(comm)).find("source is NULL"), std::string::npos)
        << collieGetLastError(comm);
    EXPECT_EQ(collieRecvAny(buf, 4, collieFloat32, &source, nullptr), collieInvalidArgument);
    EXPECT_EQ(source, -1);
    EXPECT_EQ(collieRecvAny(nullptr, 4, collieFloat32, &source, comm), collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(comm)).find("recvbuff is NULL"), std::string::npos)
        << collieGetLastError(comm);
    EXPECT_EQ(collieRecvAny(buf, 4, static_cast<collieDataType_t>(42), &source, comm), collieInvalidArgument);
    EXPECT_EQ(collieRecv(buf, 4, collieFloat32, -2, comm, nullptr), collieInvalidArgument);
    EXPECT_OK(collieGroupStart());
    EXPECT_EQ(collieRecvAny(buf, 4, collieFloat32, &source, comm), collieInvalidUsage);
    EXPECT_NE(std::string(collieGetLastError(comm)).find("cannot be part of a group"), std::string::npos)
        << collieGetLastError(comm);
    EXPECT_EQ(collieGroupEnd(), collieInvalidUsage);  // a call refused in a group fails the group
    float got[4] = {0, 0, 0, 0};                      // still usable
    EXPECT_OK(collieRecvAny(got, 4, collieFloat32, &source, comm));
    EXPECT_EQ(source, 1);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got[j], j + 1.0f);
  });
}

TEST(AnySourceCApi, AOneRankCommunicatorRefusesIt) {
  collieComm_t comm = nullptr;
  ASSERT_EQ(collieCommInitAll(&comm, 1, nullptr), collieSuccess) << collieGetLastError(nullptr);
  float buf[2];
  int source = 3;
  EXPECT_EQ(collieRecvAny(buf, 2, collieFloat32, &source, comm), collieInvalidUsage);
  EXPECT_NE(std::string(collieGetLastError(comm)).find("can never complete"), std::string::npos)
      << collieGetLastError(comm);
  EXPECT_EQ(source, -1);
  EXPECT_EQ(collieCommDestroy(comm), collieSuccess);
}

}  // namespace
}  // namespace collie::test
