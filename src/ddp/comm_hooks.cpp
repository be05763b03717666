// The communication hooks that come with collie (ddp::hooks) and broadcastCoalesced (include/collie/ddp.hpp).
#include <collie/ddp.hpp>
#include <cstring>
#include <map>
#include <vector>

#include "base/datatypes.hpp"
#include "base/errors.hpp"

namespace collie::ddp {

namespace hooks {

CommHook allReduceMean() {
  return [](Communicator& comm, GradBucket& bucket) -> PendingReduction {
    return {comm.allReduceAsync(bucket.data(), bucket.data(), bucket.count(), bucket.type(), ReduceOp::Avg), {}};
  };
}

namespace {

// float32 buckets travel as a 16-bit type: each rank divides by the world size before narrowing (so the sum
// cannot overflow where the mean would not), the 16-bit values are summed, and widened back into the bucket.
CommHook compressHook(DataType wire, uint16_t (*narrow)(float), float (*widen)(uint16_t)) {
  CommHook fallback = allReduceMean();
  return [=](Communicator& comm, GradBucket& bucket) -> PendingReduction {
    if (bucket.type() != DataType::Float32) return fallback(comm, bucket);
    const size_t n = bucket.count();
    std::vector<std::byte>& scratch = bucket.scratch();
    scratch.resize(n * sizeof(uint16_t));
    auto* wireData = reinterpret_cast<uint16_t*>(scratch.data());
    const auto* src = static_cast<const float*>(bucket.data());
    const float scale = 1.0f / static_cast<float>(comm.size());
    for (size_t i = 0; i < n; ++i) wireData[i] = narrow(src[i] * scale);
    Work work = comm.allReduceAsync(wireData, wireData, n, wire, ReduceOp::Sum);
    GradBucket* b = &bucket;
    return {work, [b, wireData, n, widen] {
              auto* dst = static_cast<float*>(b->data());
              for (size_t i = 0; i < n; ++i) dst[i] = widen(wireData[i]);
            }};
  };
}

}  // namespace

CommHook fp16Compress() { return compressHook(DataType::Float16, base::floatToHalf, base::halfToFloat); }
CommHook bf16Compress() { return compressHook(DataType::Bfloat16, base::floatToBf16, base::bf16ToFloat); }

}  // namespace hooks

void broadcastCoalesced(Communicator& comm, std::span<const HostBuffer> buffers, int root, size_t chunkBytes) {
  COLLIE_ARG_CHECK(chunkBytes > 0, "broadcastCoalesced: chunkBytes must be positive");
  std::map<int, std::vector<const HostBuffer*>> byType;  // in a fixed order on every rank
  for (const HostBuffer& b : buffers) {
    COLLIE_ARG_CHECK(base::isValidDataType(static_cast<int>(b.type)), "broadcastCoalesced: invalid type %d",
                     static_cast<int>(b.type));
    COLLIE_ARG_CHECK(b.data != nullptr || b.count == 0, "broadcastCoalesced: null buffer");
    if (b.count) byType[static_cast<int>(b.type)].push_back(&b);
  }
  const bool isRoot = comm.rank() == root;
  std::vector<std::byte> staging;
  for (auto& [typeValue, list] : byType) {
    const auto type = static_cast<DataType>(typeValue);
    const size_t esize = base::dataTypeSize(type);
    size_t k = 0;
    while (k < list.size()) {
      // One chunk: buffers k..e-1 fill up to chunkBytes; a buffer larger than that goes alone, in place.
      size_t e = k, bytes = 0;
      while (e < list.size() && (e == k || bytes + list[e]->count * esize <= chunkBytes))
        bytes += list[e++]->count * esize;
      if (e == k + 1) {
        comm.broadcast(list[k]->data, list[k]->data, list[k]->count, type, root);
      } else {
        staging.resize(bytes);
        size_t off = 0;
        if (isRoot)
          for (size_t j = k; j < e; off += list[j]->count * esize, ++j)
            std::memcpy(staging.data() + off, list[j]->data, list[j]->count * esize);
        comm.broadcast(staging.data(), staging.data(), bytes / esize, type, root);
        off = 0;
        if (!isRoot)
          for (size_t j = k; j < e; off += list[j]->count * esize, ++j)
            std::memcpy(list[j]->data, staging.data() + off, list[j]->count * esize);
      }
      k = e;
    }
  }
}

}  // namespace collie::ddp
