// Lazy loading of the CUDA plugin, on any machine (these tests need no GPU): host calls never load it nor the
// CUDA driver; a stream in a process without CUDA is refused before anything is loaded; the plugin loads, has
// this libcollie's ABI and names the reason when no device can be used; a missing plugin gives a clear error.
#include <collie/collie.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include <collie/collie.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/data.hpp"
#include "common/launcher.hpp"
#include "core/cuda_plugin.hpp"
#include "gpu/gpu_test_util.hpp"

namespace collie::test {
namespace {

bool mentions(const std::string& text, const char* word) { return text.find(word) != std::string::npos; }

// Whether an object whose path contains `name` is loaded in this process.
bool loaded(const char* name) {
  struct Q {
    const char* name;
    bool found;
  } q{name, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Q*>(data);
        if (info->dlpi_name && std::strstr(info->dlpi_name, q->name)) q->found = true;
        return 0;
      },
      &q);
  return q.found;
}

TEST(GpuLoading, HostCallsLoadNeitherThePluginNorTheDriver) {
  if (core::cuda::loadedPlugin() || loaded("libcuda.so"))
    GTEST_SKIP() << "CUDA was already used in this process (run this test alone, as CTest does)";
  ThreadLauncher::run(2, [](Communicator& comm) {
    const size_t count = 1000;
    Buffer in(DataType::Float32, count), out(DataType::Float32, count);
    in.fillInput(0, count, ReduceOp::Sum, comm.rank(), 0);
    comm.allReduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
    EXPECT_TRUE(matchesReduced(out.data(), count, DataType::Float32, ReduceOp::Sum, comm.size(), 0));
  });
  collieComm_t comm = nullptr;
  ASSERT_EQ(collieCommInitAll(&comm, 1, nullptr), collieSuccess);
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(collieAllReduce(x, x, 4, collieFloat32, collieSum, comm, nullptr), collieSuccess);
  EXPECT_EQ(collieCommDestroy(comm), collieSuccess);
  EXPECT_EQ(core::cuda::loadedPlugin(), nullptr);
  EXPECT_FALSE(loaded("libcollie_cuda")) << "a host call loaded the CUDA plugin";
  EXPECT_FALSE(loaded("libcuda.so")) << "a host call loaded the CUDA driver";
}

TEST(GpuLoading, AStreamInAProcessWithoutCudaIsInvalidUsageAndLoadsNothing) {
  if (core::cuda::loadedPlugin() || loaded("libcuda.so"))
    GTEST_SKIP() << "CUDA was already used in this process (run this test alone, as CTest does)";
  collieComm_t comm = nullptr;
  ASSERT_EQ(collieCommInitAll(&comm, 1, nullptr), collieSuccess);
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(collieAllReduce(x, x, 4, collieFloat32, collieSum, comm, reinterpret_cast<void*>(0x1234)),
            collieInvalidUsage);
  std::string why = collieGetLastError(comm);
  EXPECT_TRUE(mentions(why, "stream")) << why;
  EXPECT_TRUE(mentions(why, "not initialised CUDA")) << why;
  EXPECT_EQ(collieCommDestroy(comm), collieSuccess);
  EXPECT_FALSE(loaded("libcollie_cuda"));
}

// The plugin of this build loads (COLLIE_CUDA_PLUGIN points at it), matches the ABI, was built for sm_80 and
// sm_90, and either finds a device or says why not, naming the CUDA error.
TEST(GpuLoading, ThePluginLoadsAndNamesAMissingDevice) {
  std::string why;
  const CollieCudaPlugin* p = core::cuda::plugin(&why);
  ASSERT_NE(p, nullptr) << why;
  EXPECT_EQ(p->abi, static_cast<uint32_t>(COLLIE_CUDA_PLUGIN_ABI));
  EXPECT_GE(p->size, sizeof(CollieCudaPlugin));
  EXPECT_TRUE(mentions(p->archs, "80")) << p->archs;
  EXPECT_TRUE(mentions(p->archs, "90")) << p->archs;
  int count = -1;
  int rc = p->deviceCount(&count);
  if (rc == 0 && count > 0) {
    EXPECT_NO_THROW(core::cuda::requirePlugin("a test"));
    return;
  }
  try {
    core::cuda::requirePlugin("a test");
    ADD_FAILURE() << "requirePlugin succeeded without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::UnhandledCudaError);
    std::string msg = e.what();
    EXPECT_TRUE(mentions(msg, "no CUDA device") || mentions(msg, "cudaGetDeviceCount")) << msg;
    if (rc != 0) {
      EXPECT_TRUE(mentions(msg, p->errorString(rc))) << msg;
    }
    std::printf("without a device, a device call says: %s\n", msg.c_str());
  }
}

// In a child, so that the loader's one attempt sees the bad path.
TEST(GpuLoading, AMissingPluginGivesAClearError) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("COLLIE_CUDA_PLUGIN", "/nonexistent/libcollie_cuda.so", 1);
    std::string why;
    const CollieCudaPlugin* p = core::cuda::plugin(&why);
    bool ok = p == nullptr && mentions(why, "could not be loaded") && mentions(why, "/nonexistent/libcollie_cuda.so");
    if (!ok) std::fprintf(stderr, "unexpected: plugin=%p why=%s\n", static_cast<const void*>(p), why.c_str());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace collie::test
