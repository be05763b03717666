// Stream semantics of calls on device buffers: stream order with no host synchronisation, a call returning
// before its stream reaches it, one thread driving every rank through the C API (which works only if calls
// return at once), the C++ API's blocking and async forms, refused mixes of host and device memory, and a
// failure coming out through collieCommGetAsyncError and the next call without leaving a stream stuck.
#include <collie/collie.h>
#include <gtest/gtest.h>

#include <chrono>
#include <collie/collie.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/data.hpp"
#include "common/launcher.hpp"
#include "core/api_access.hpp"
#include "gpu/gpu_test_util.hpp"

namespace collie::test {
namespace {

using gpu::DeviceMem;
using gpu::Stream;

bool mentions(const char* text, const char* word) { return text && std::strstr(text, word) != nullptr; }

constexpr long long kSpinNs = 200 * 1000 * 1000;  // 0.2 s of GPU time before a kernel writes the input

// A kernel writes the input late; the call; a kernel reads the output; more calls chained in place; one
// synchronisation at the end. The call must return while the stream is still busy with the first kernel.
void streamOrderBody(Communicator& comm) {
  CUDA_ASSERT(cudaSetDevice(comm.rank() % gpu::deviceCount()));
  const size_t count = (size_t{1} << 20) + 5;
  const size_t bytes = count * sizeof(float);
  Buffer input(DataType::Float32, count);
  input.fillInput(0, count, ReduceOp::Sum, comm.rank(), 0);
  Buffer expected(DataType::Float32, count);
  comm.allReduce(input.data(), expected.data(), count, DataType::Float32, ReduceOp::Sum);  // host oracle
  gpu::PinnedMem got(bytes);  // pinned: a copy to pageable memory could block inside the driver (see PinnedMem)
  {
    DeviceMem ready(bytes), send(bytes), recv(bytes), check(bytes);
    Stream stream;
    cudaStream_t st = stream.get();
    CUDA_ASSERT(cudaMemcpy(ready.get(), input.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemset(send.get(), 0, bytes));
    CUDA_ASSERT(cudaMemset(recv.get(), 0, bytes));
    CUDA_ASSERT(cudaDeviceSynchronize());
    comm.barrier();

    gpu::launchDelayedCopy(send.get(), ready.get(), bytes, kSpinNs, st);  // writes the input after 0.2 s
    InternalAccess::runOnStream(comm, algorithms::Collective::AllReduce, send.get(), recv.get(), count,
                                DataType::Float32, ReduceOp::Sum, 0, st);
    EXPECT_EQ(cudaStreamQuery(st), cudaErrorNotReady) << "the call did not return before its stream reached it";
    gpu::launchDelayedCopy(check.get(), recv.get(), bytes, 0, st);  // a kernel reads the output
    CUDA_ASSERT(cudaMemsetAsync(recv.get(), 0xFF, bytes, st));      // later writes must not reach `check`
    // Chained calls in place on the copy: Max of equal values leaves them alone, Sum of nranks copies scales.
    InternalAccess::runOnStream(comm, algorithms::Collective::AllReduce, check.get(), check.get(), count,
                                DataType::Float32, ReduceOp::Max, 0, st);
    InternalAccess::runOnStream(comm, algorithms::Collective::AllReduce, check.get(), check.get(), count,
                                DataType::Float32, ReduceOp::Avg, 0, st);
    CUDA_ASSERT(cudaMemcpyAsync(got.get(), check.get(), bytes, cudaMemcpyDeviceToHost, st));
    CUDA_ASSERT(cudaStreamSynchronize(st));
    comm.barrier();
  }
  EXPECT_EQ(std::memcmp(got.get(), expected.data(), bytes), 0) << "the stream-ordered result differs";
}

TEST(GpuStream, KernelWritesCallKernelReadsWithoutHostSyncThreads) {
  COLLIE_SKIP_WITHOUT_GPU();
  ThreadLauncher::run(2, streamOrderBody);
}

TEST(GpuStream, KernelWritesCallKernelReadsWithoutHostSyncProcesses) {
  COLLIE_SKIP_WITHOUT_GPU();
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(2, streamOrderBody)));
}

// NCCL's single-thread pattern: one thread issues every rank's call, one after the other, with no group. A call
// that waited for the collective would wait for a rank whose call is not issued yet.
TEST(GpuCApi, OneThreadDrivesEveryRankThroughInitAllAndStreams) {
  COLLIE_SKIP_WITHOUT_GPU();
  setenv("COLLIE_TIMEOUT", "30000", 1);  // a call that blocked fails in 30 s instead of hanging
  const int n = 4;
  std::vector<int> devlist(n);
  for (int r = 0; r < n; ++r) devlist[static_cast<size_t>(r)] = r % gpu::deviceCount();
  std::vector<collieComm_t> comms(n);
  ASSERT_EQ(collieCommInitAll(comms.data(), n, devlist.data()), collieSuccess) << collieGetLastError(nullptr);
  const size_t count = 100003;
  const size_t bytes = count * sizeof(float);
  std::vector<std::unique_ptr<DeviceMem>> bufs;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int r = 0; r < n; ++r) {
    CUDA_ASSERT(cudaSetDevice(devlist[static_cast<size_t>(r)]));
    bufs.push_back(std::make_unique<DeviceMem>(bytes));
    streams.push_back(std::make_unique<Stream>());
    Buffer in(DataType::Float32, count);
    in.fillInput(0, count, ReduceOp::Sum, r, 0);
    CUDA_ASSERT(cudaMemcpy(bufs.back()->get(), in.data(), bytes, cudaMemcpyHostToDevice));
  }
  for (int r = 0; r < n; ++r) {
    CUDA_ASSERT(cudaSetDevice(devlist[static_cast<size_t>(r)]));
    void* p = bufs[static_cast<size_t>(r)]->get();
    ASSERT_EQ(collieAllReduce(p, p, count, collieFloat32, collieSum, comms[static_cast<size_t>(r)],
                              streams[static_cast<size_t>(r)]->get()),
              collieSuccess)
        << collieGetLastError(comms[static_cast<size_t>(r)]);
  }
  for (int r = 0; r < n; ++r) {
    CUDA_ASSERT(cudaStreamSynchronize(streams[static_cast<size_t>(r)]->get()));
    std::vector<float> out(count);
    CUDA_ASSERT(cudaMemcpy(out.data(), bufs[static_cast<size_t>(r)]->get(), bytes, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(matchesReduced(out.data(), count, DataType::Float32, ReduceOp::Sum, n, 0)) << "rank " << r;
    collieResult_t async = collieInternalError;
    EXPECT_EQ(collieCommGetAsyncError(comms[static_cast<size_t>(r)], &async), collieSuccess);
    EXPECT_EQ(async, collieSuccess);
  }
  for (collieComm_t c : comms) EXPECT_EQ(collieCommDestroy(c), collieSuccess);
}

// The C++ API has no stream: device buffers go on the default stream and the blocking form returns with the
// result in device memory; the async form's Work is done once it is.
TEST(GpuCppApi, BlockingAndAsyncFormsOnDeviceBuffers) {
  COLLIE_SKIP_WITHOUT_GPU();
  ThreadLauncher::run(2, [](Communicator& comm) {
    CUDA_ASSERT(cudaSetDevice(comm.rank() % gpu::deviceCount()));
    const size_t count = 4099;
    const size_t bytes = count * sizeof(double);
    Buffer in(DataType::Float64, count);
    in.fillInput(0, count, ReduceOp::Max, comm.rank(), 0);
    std::vector<double> out(count);
    {
      DeviceMem d(bytes), d2(bytes);
      CUDA_ASSERT(cudaMemcpy(d.get(), in.data(), bytes, cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(d2.get(), in.data(), bytes, cudaMemcpyHostToDevice));
      comm.barrier();
      comm.allReduce(d.get(), d.get(), count, DataType::Float64, ReduceOp::Max);
      CUDA_ASSERT(cudaMemcpy(out.data(), d.get(), bytes, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(matchesReduced(out.data(), count, DataType::Float64, ReduceOp::Max, comm.size(), 0));
      Work w = comm.allReduceAsync(d2.get(), d2.get(), count, DataType::Float64, ReduceOp::Max);
      w.wait();
      CUDA_ASSERT(cudaMemcpy(out.data(), d2.get(), bytes, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(matchesReduced(out.data(), count, DataType::Float64, ReduceOp::Max, comm.size(), 0));
      comm.barrier();
    }
  });
}

// Mixed memory kinds and a stream with pageable memory are refused, naming the buffers; nothing is enqueued and
// the communicator stays usable.
TEST(GpuCApi, MixedHostAndDeviceBuffersAreInvalidUsage) {
  COLLIE_SKIP_WITHOUT_GPU();
  collieComm_t comm = nullptr;
  ASSERT_EQ(collieCommInitAll(&comm, 1, nullptr), collieSuccess);
  CUDA_ASSERT(cudaSetDevice(0));
  const size_t count = 64;
  DeviceMem d(count * sizeof(float));
  std::vector<float> host(count, 1.0f);
  Stream stream;
  EXPECT_EQ(collieAllReduce(d.get(), host.data(), count, collieFloat32, collieSum, comm, stream.get()),
            collieInvalidUsage);
  EXPECT_TRUE(mentions(collieGetLastError(comm), "sendbuff")) << collieGetLastError(comm);
  EXPECT_TRUE(mentions(collieGetLastError(comm), "recvbuff")) << collieGetLastError(comm);
  EXPECT_EQ(collieAllReduce(host.data(), d.get(), count, collieFloat32, collieSum, comm, nullptr), collieInvalidUsage);
  EXPECT_TRUE(mentions(collieGetLastError(comm), "device memory")) << collieGetLastError(comm);
  EXPECT_EQ(collieAllReduce(host.data(), host.data(), count, collieFloat32, collieSum, comm, stream.get()),
            collieInvalidUsage);
  EXPECT_TRUE(mentions(collieGetLastError(comm), "pageable")) << collieGetLastError(comm);
  collieResult_t async = collieInternalError;
  EXPECT_EQ(collieCommGetAsyncError(comm, &async), collieSuccess);
  EXPECT_EQ(async, collieSuccess);
  // Still usable, on both kinds.
  EXPECT_EQ(collieAllReduce(host.data(), host.data(), count, collieFloat32, collieSum, comm, nullptr), collieSuccess);
  EXPECT_EQ(collieAllReduce(d.get(), d.get(), count, collieFloat32, collieSum, comm, stream.get()), collieSuccess)
      << collieGetLastError(comm);
  CUDA_ASSERT(cudaStreamSynchronize(stream.get()));
  EXPECT_EQ(collieCommDestroy(comm), collieSuccess);
}

// A group refused at its end (a call in it named a rank that does not exist) leaves device buffers and the stream
// untouched: device calls are staged only when a group is issued (before 2026-11-29 they were staged when made, and
// the refused group's copy-back wrote the unused pinned block into recvbuff). One rank: nothing waits on a peer.
TEST(GpuCApi, ARefusedGroupLeavesDeviceBuffersUntouched) {
  COLLIE_SKIP_WITHOUT_GPU();
  collieComm_t comm = nullptr;
  ASSERT_EQ(collieCommInitAll(&comm, 1, nullptr), collieSuccess);
  CUDA_ASSERT(cudaSetDevice(0));
  const size_t count = 4096, bytes = count * sizeof(float);
  DeviceMem send(bytes), recv(bytes);
  std::vector<float> ones(count, 1.0f), before(count, -3.0f), after(count, 0.0f);
  CUDA_ASSERT(cudaMemcpy(send.get(), ones.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_ASSERT(cudaMemcpy(recv.get(), before.data(), bytes, cudaMemcpyHostToDevice));
  Stream stream;
  ASSERT_EQ(collieGroupStart(), collieSuccess);
  EXPECT_EQ(collieAllReduce(send.get(), recv.get(), count, collieFloat32, collieSum, comm, stream.get()),
            collieSuccess);
  EXPECT_EQ(collieSend(send.get(), count, collieFloat32, 3, comm, stream.get()), collieInvalidArgument);
  EXPECT_EQ(collieGroupEnd(), collieInvalidArgument);
  CUDA_ASSERT(cudaStreamSynchronize(stream.get()));
  CUDA_ASSERT(cudaMemcpy(after.data(), recv.get(), bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(after, before) << "a refused group wrote a device buffer";
  EXPECT_EQ(collieAllReduce(send.get(), recv.get(), count, collieFloat32, collieSum, comm, stream.get()),
            collieSuccess);
  CUDA_ASSERT(cudaStreamSynchronize(stream.get()));
  CUDA_ASSERT(cudaMemcpy(after.data(), recv.get(), bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(after, ones) << "the next call on the same buffers";
  EXPECT_EQ(collieCommDestroy(comm), collieSuccess);
}

// One thread drives two 2-rank communicators a and b, rank r's calls on stream S[r], in one group whose batches come
// in the order a0, b0, b1, a1: a0 receives what a1 sends and b1 what b0 sends. Each caller's stream must wait for the
// group's calls only once all of them are staged (before 2026-11-29, b0's input waited on S0 behind a0's end, which
// needs a1, whose stream S1 waited behind b1, which needs b0: groupEnd hung). Then the four device calls of one
// communicator pair in one group, two on each stream.
TEST(GpuCApi, AGroupAcrossCommunicatorsSharingAStreamCompletes) {
  COLLIE_SKIP_WITHOUT_GPU();
  setenv("COLLIE_TIMEOUT", "20000", 1);
  std::vector<collieComm_t> a(2), b(2);
  ASSERT_EQ(collieCommInitAll(a.data(), 2, nullptr), collieSuccess);
  ASSERT_EQ(collieCommInitAll(b.data(), 2, nullptr), collieSuccess);
  CUDA_ASSERT(cudaSetDevice(0));
  const size_t count = 1000, bytes = count * sizeof(float);
  Stream s0, s1;
  DeviceMem ra0(bytes), sb0(bytes), rb1(bytes), sa1(bytes);
  std::vector<float> seven(count, 7.0f), nine(count, 9.0f), got(count, 0.0f);
  CUDA_ASSERT(cudaMemcpy(sa1.get(), seven.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_ASSERT(cudaMemcpy(sb0.get(), nine.data(), bytes, cudaMemcpyHostToDevice));
  ASSERT_EQ(collieGroupStart(), collieSuccess);
  EXPECT_EQ(collieRecv(ra0.get(), count, collieFloat32, 1, a[0], s0.get()), collieSuccess);
  EXPECT_EQ(collieSend(sb0.get(), count, collieFloat32, 1, b[0], s0.get()), collieSuccess);
  EXPECT_EQ(collieRecv(rb1.get(), count, collieFloat32, 0, b[1], s1.get()), collieSuccess);
  EXPECT_EQ(collieSend(sa1.get(), count, collieFloat32, 0, a[1], s1.get()), collieSuccess);
  EXPECT_EQ(collieGroupEnd(), collieSuccess) << collieGetLastError(nullptr);
  CUDA_ASSERT(cudaStreamSynchronize(s0.get()));
  CUDA_ASSERT(cudaStreamSynchronize(s1.get()));
  CUDA_ASSERT(cudaMemcpy(got.data(), ra0.get(), bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, seven) << "a0 from a1";
  CUDA_ASSERT(cudaMemcpy(got.data(), rb1.get(), bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, nine) << "b1 from b0";
  for (collieComm_t c : {a[0], a[1], b[0], b[1]}) EXPECT_EQ(collieCommDestroy(c), collieSuccess);
}

// Rank 1 never makes its call: rank 0's stream-ordered call returns at once, its collective times out on the
// progress thread, the stream goes on (the copy-back is released), and the failure is reported by
// collieCommGetAsyncError and by the next call.
TEST(GpuCApi, AFailedCallSurfacesAsAsyncErrorAndReleasesTheStream) {
  COLLIE_SKIP_WITHOUT_GPU();
  setenv("COLLIE_TIMEOUT", "3000", 1);
  std::vector<collieComm_t> comms(2);
  ASSERT_EQ(collieCommInitAll(comms.data(), 2, nullptr), collieSuccess);
  CUDA_ASSERT(cudaSetDevice(0));
  const size_t count = 1024;
  DeviceMem d(count * sizeof(float));
  Stream stream;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(collieAllReduce(d.get(), d.get(), count, collieFloat32, collieSum, comms[0], stream.get()), collieSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "the call waited for its peer";
  CUDA_ASSERT(cudaStreamSynchronize(stream.get()));  // must not hang
  collieResult_t async = collieSuccess;
  for (int i = 0; i < 100 && async == collieSuccess; ++i) {
    EXPECT_EQ(collieCommGetAsyncError(comms[0], &async), collieSuccess);
    if (async == collieSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(async, collieSuccess);
  EXPECT_NE(collieAllReduce(d.get(), d.get(), count, collieFloat32, collieSum, comms[0], stream.get()), collieSuccess);
  for (collieComm_t c : comms) collieCommAbort(c);
}

}  // namespace
}  // namespace collie::test
