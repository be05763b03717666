// Collectives on device buffers, stream-ordered (the C API's semantics, through InternalAccess::runOnStream): every
// collective, type and op, in place and out of place, with 2 and 4 ranks as threads (createAll) and as processes, all
// ranks sharing GPU 0 when there is one GPU (else rank r uses GPU r % count).
//
// Each case copies a host image of the buffers (guard zones included) to the device, makes the call, copies the
// image back, all on the rank's stream with no host synchronisation in between, and compares it byte for byte
// with the same call on host buffers (the oracle: the host path, tested element by element elsewhere). The
// device path stages through the same host executor, so the bytes must match exactly.
//
// Device and pinned memory are allocated once per rank before the first call and freed after the last one (every
// stream drained and a barrier passed): cudaFree synchronises the whole device, which would wait for the other
// ranks' staged calls, which may wait for this rank. Copies go through pinned memory (see PinnedMem).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <collie/collie.hpp>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "common/bodies.hpp"
#include "common/data.hpp"
#include "common/launcher.hpp"
#include "core/api_access.hpp"
#include "gpu/gpu_test_util.hpp"

namespace collie::test {
namespace {

using gpu::DeviceMem;
using gpu::Stream;

enum class Launch { Threads, Processes };

// The bytes of each buffer of a call on this rank: `send` and `recv` are element counts; in place, the send
// buffer lies inside the recv buffer at sendOffset (AllGather) or the recv buffer inside the send buffer at
// recvOffset (ReduceScatter), or they are the same (the others).
struct Shape {
  size_t send = 0, recv = 0;
  size_t sendOffset = 0, recvOffset = 0;  // in elements, in place only
};

Shape shapeOf(Coll coll, size_t count, int rank, int nranks, bool inPlace) {
  const size_t n = static_cast<size_t>(nranks);
  Shape s{count, count, 0, 0};
  if (coll == Coll::AllGather) {
    s.recv = count * n;
    if (inPlace) s.sendOffset = count * static_cast<size_t>(rank);
  } else if (coll == Coll::ReduceScatter) {
    s.send = count * n;
    if (inPlace) s.recvOffset = count * static_cast<size_t>(rank);
  } else if (coll == Coll::AllToAll) {
    s.send = s.recv = count * n;
  }
  return s;
}

bool hasInPlace(Coll coll) { return coll != Coll::AllToAll && coll != Coll::SendRecv; }

// One call of coll on whatever memory the pointers are: host buffers (ordered == false) block; device buffers with
// ordered == true are enqueued on `stream`, as the C API does (InternalAccess::runOnStream).
void call(Communicator& c, Coll coll, const void* s, void* r, size_t count, DataType t, ReduceOp op, int root,
          bool ordered = false, cudaStream_t stream = nullptr) {
  using algorithms::Collective;
  const int n = c.size(), me = c.rank();
  auto run = [&](Collective which, const void* send, void* recv, int rootOrPeer) {
    if (ordered) return InternalAccess::runOnStream(c, which, send, recv, count, t, op, rootOrPeer, stream);
    switch (which) {
      case Collective::AllReduce:
        return c.allReduce(send, recv, count, t, op);
      case Collective::Broadcast:
        return c.broadcast(send, recv, count, t, rootOrPeer);
      case Collective::Reduce:
        return c.reduce(send, recv, count, t, op, rootOrPeer);
      case Collective::AllGather:
        return c.allGather(send, recv, count, t);
      case Collective::ReduceScatter:
        return c.reduceScatter(send, recv, count, t, op);
      case Collective::AllToAll:
        return c.allToAll(send, recv, count, t);
      case Collective::Send:
        return c.send(send, count, t, rootOrPeer);
      case Collective::Recv:
        return c.recv(recv, count, t, rootOrPeer);
    }
  };
  switch (coll) {
    case Coll::AllReduce:
      return run(Collective::AllReduce, s, r, 0);
    case Coll::Broadcast:
      return run(Collective::Broadcast, s, r, root);
    case Coll::Reduce:
      return run(Collective::Reduce, s, r, root);
    case Coll::AllGather:
      return run(Collective::AllGather, s, r, 0);
    case Coll::ReduceScatter:
      return run(Collective::ReduceScatter, s, r, 0);
    case Coll::AllToAll:
      return run(Collective::AllToAll, s, r, 0);
    case Coll::SendRecv:
      groupStart();
      run(Collective::Send, s, nullptr, (me + 1) % n);
      run(Collective::Recv, nullptr, r, (me + n - 1) % n);
      groupEnd();
      return;
  }
}

// A buffer image: guard + elements + guard, all sentinel bytes to start with.
std::vector<uint8_t> image(size_t elems, DataType t) {
  return std::vector<uint8_t>(elems * typeSize(t) + 2 * kGuardBytes, kSentinelByte);
}

void fillInput(std::vector<uint8_t>& img, size_t firstElem, size_t n, DataType t, ReduceOp op, int rank) {
  Buffer b(t, n);
  b.fillInput(0, n, op, rank, 0);
  std::memcpy(img.data() + kGuardBytes + firstElem * typeSize(t), b.data(), n * typeSize(t));
}

// Per rank: the device regions (as large as the largest case), the stream, and the host images.
struct Rig {
  explicit Rig(size_t maxBytes)
      : send(maxBytes), recv(maxBytes), inA(maxBytes), inB(maxBytes), outA(maxBytes), outB(maxBytes) {}
  DeviceMem send, recv;
  gpu::PinnedMem inA, inB, outA, outB;  // the images on their way in and out
  Stream stream;
};

void runCase(Communicator& comm, Rig& rig, Coll coll, DataType t, ReduceOp op, size_t count, bool inPlace, int root) {
  SCOPED_TRACE(collName(coll) + " " + typeName(t) + " " + opName(op) + " count " + std::to_string(count) +
               (inPlace ? " in place" : "") + " root " + std::to_string(root));
  const int rank = comm.rank(), n = comm.size();
  const Shape s = shapeOf(coll, count, rank, n, inPlace);
  const ReduceOp dataOp = reduces(coll) ? op : kNoReduction;
  const bool single = inPlace;  // one image holds both buffers
  // Host images: A = send (or the single buffer), B = recv (out of place only).
  std::vector<uint8_t> a = image(single ? std::max(s.send, s.recv) : s.send, t);
  std::vector<uint8_t> b = image(single ? 0 : s.recv, t);
  fillInput(a, s.sendOffset, s.send, t, dataOp, rank);  // a non-root's Broadcast input is ignored (or overwritten)
  const size_t es = typeSize(t);
  auto sendIn = [&](uint8_t* base) { return base + kGuardBytes + s.sendOffset * es; };
  auto recvIn = [&](uint8_t* base) { return base + kGuardBytes + s.recvOffset * es; };

  // Device: images in, the call, images out, all in stream order.
  cudaStream_t st = rig.stream.get();
  char* da = rig.send.get();
  char* db = rig.recv.get();
  ASSERT_LE(a.size(), rig.send.bytes());
  ASSERT_LE(b.size(), rig.recv.bytes());
  std::memcpy(rig.inA.get(), a.data(), a.size());
  std::memcpy(rig.inB.get(), b.data(), b.size());
  CUDA_ASSERT(cudaMemcpyAsync(da, rig.inA.get(), a.size(), cudaMemcpyHostToDevice, st));
  if (!single) CUDA_ASSERT(cudaMemcpyAsync(db, rig.inB.get(), b.size(), cudaMemcpyHostToDevice, st));
  {
    const void* dsend = da + kGuardBytes + s.sendOffset * es;
    void* drecv = single ? static_cast<void*>(da + kGuardBytes + s.recvOffset * es) : db + kGuardBytes;
    call(comm, coll, dsend, drecv, count, t, op, root, true, st);
  }
  CUDA_ASSERT(cudaMemcpyAsync(rig.outA.get(), da, a.size(), cudaMemcpyDeviceToHost, st));
  if (!single) CUDA_ASSERT(cudaMemcpyAsync(rig.outB.get(), db, b.size(), cudaMemcpyDeviceToHost, st));

  // The oracle on host buffers, while the device works.
  call(comm, coll, sendIn(a.data()), single ? recvIn(a.data()) : b.data() + kGuardBytes, count, t, op, root);

  CUDA_ASSERT(cudaStreamSynchronize(st));
  EXPECT_EQ(std::memcmp(rig.outA.get(), a.data(), a.size()), 0)
      << "the device's " << (single ? "buffer" : "sendbuff") << " image differs from the host's";
  if (!single) {
    EXPECT_EQ(std::memcmp(rig.outB.get(), b.data(), b.size()), 0)
        << "the device's recvbuff image differs from the host's";
  }
}

// Every case of one collective on this rank, in the same order on every rank.
void matrixBody(Communicator& comm, Coll coll, const std::vector<size_t>& counts) {
  const int nd = gpu::deviceCount();
  CUDA_ASSERT(cudaSetDevice(comm.rank() % nd));
  size_t maxCount = *std::max_element(counts.begin(), counts.end());
  const size_t maxBytes = maxCount * static_cast<size_t>(comm.size()) * 8 + 2 * kGuardBytes;
  std::unique_ptr<Rig> rig;
  try {
    rig = std::make_unique<Rig>(maxBytes);
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  comm.barrier();  // every rank's memory is allocated before any call is staged
  std::vector<ReduceOp> ops = reduces(coll) ? kAllOps : std::vector<ReduceOp>{ReduceOp::Sum};
  int caseNo = 0;
  for (size_t count : counts) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : ops) {
        for (bool inPlace : {false, true}) {
          if (inPlace && !hasInPlace(coll)) continue;
          const int root = (caseNo++ % 2 == 0) ? comm.size() - 1 : 0;
          runCase(comm, *rig, coll, t, op, count, inPlace, root);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
  CUDA_ASSERT(cudaStreamSynchronize(rig->stream.get()));
  comm.barrier();  // no rank frees device memory while another may still have calls in flight
  rig.reset();
}

void launch(Launch how, int nranks, const TestBody& body) {
  Options options;
  options.timeout = std::chrono::seconds(120);
  if (how == Launch::Threads) {
    ThreadLauncher::run(nranks, body, options);
  } else {
    auto exits = ProcessLauncher::run(nranks, body, options, std::chrono::seconds(540));
    EXPECT_TRUE(allRanksSucceeded(exits));
  }
}

// ---- The matrix ---------------------------------------------------------------------------------------------

using MatrixParam = std::tuple<Launch, int, Coll>;

class GpuCollectiveMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(GpuCollectiveMatrix, EveryTypeOpAndCountMatchesTheHostPath) {
  COLLIE_SKIP_WITHOUT_GPU();
  const Coll coll = std::get<2>(GetParam());
  launch(std::get<0>(GetParam()), std::get<1>(GetParam()), [coll](Communicator& comm) {
    matrixBody(comm, coll, {1, 1031, 65539});
  });
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuCollectiveMatrix,
                         ::testing::Combine(::testing::Values(Launch::Threads, Launch::Processes),
                                            ::testing::Values(2, 4), ::testing::ValuesIn(kAllColls)),
                         [](const ::testing::TestParamInfo<MatrixParam>& info) {
                           const Launch how = std::get<0>(info.param);
                           return std::string(how == Launch::Threads ? "threads" : "processes") + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks_" +
                                  collName(std::get<2>(info.param));
                         });

// One large AllReduce, AllGather and ReduceScatter (many slices, many staging blocks' worth).
class GpuLarge : public ::testing::TestWithParam<Launch> {};

TEST_P(GpuLarge, LargeCountsMatchTheHostPath) {
  COLLIE_SKIP_WITHOUT_GPU();
  launch(GetParam(), 4, [](Communicator& comm) {
    CUDA_ASSERT(cudaSetDevice(comm.rank() % gpu::deviceCount()));
    const size_t count = kLargeCount;
    auto rig = std::make_unique<Rig>(count * 4 * 8 + 2 * kGuardBytes);
    comm.barrier();
    for (DataType t : {DataType::Float32, DataType::Bfloat16}) {
      runCase(comm, *rig, Coll::AllReduce, t, ReduceOp::Sum, count, false, 0);
      runCase(comm, *rig, Coll::AllReduce, t, ReduceOp::Avg, count, true, 0);
    }
    runCase(comm, *rig, Coll::AllGather, DataType::Float32, ReduceOp::Sum, count, true, 0);
    runCase(comm, *rig, Coll::ReduceScatter, DataType::Float64, ReduceOp::Max, count, false, 0);
    CUDA_ASSERT(cudaStreamSynchronize(rig->stream.get()));
    comm.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuLarge, ::testing::Values(Launch::Threads, Launch::Processes),
                         [](const ::testing::TestParamInfo<Launch>& info) {
                           return std::string(info.param == Launch::Threads ? "threads" : "processes");
                         });

}  // namespace
}  // namespace collie::test
