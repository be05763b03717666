// Device reduction kernels: dst = a op b (and dst2 = the same, fused), for every collie type and op.
//
// One grid-stride kernel per (type, op). Each thread moves 16 bytes at a time (uint4 loads and stores), four
// vectors in flight per iteration so that enough loads are outstanding to cover memory latency, then the
// elements past the last whole vector one by one. Pointers that are not all 16-byte aligned take the
// element-by-element loop for the whole range. fp16 and bf16 are reduced natively: Sum and Prod on pairs
// (__hadd2 / __hmul2, correctly rounded, so the result equals the host's float-then-round), Max and Min by a
// select on each element that propagates NaN the way the host does; the Avg division goes through float, as on
// the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/reduce_kernels.hpp"

namespace collie::cuda {
namespace {

// collieDataType_t and collieRedOp_t values (collie.h is not included, to keep this file's includes minimal).
enum Type : int { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kHalf, kFloat, kDouble, kBf16 };
enum Op : int { kSum, kProd, kMax, kMin, kAvg };

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

// ---- Element arithmetic -----------------------------------------------------------------------------------

template <typename T, bool kIntegral = std::is_integral_v<T>>
struct Arith {  // integer Sum and Prod run unsigned, so that they wrap without undefined behaviour
  using type = std::make_unsigned_t<T>;
};
template <typename T>
struct Arith<T, false> {
  using type = T;
};

template <typename T>
__device__ __forceinline__ bool isNan(T x) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return __hisnan(x);
  } else if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else {
    return false;
  }
}

template <typename T>
__device__ __forceinline__ bool greater(T a, T b) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return __hgt(a, b);
  } else {
    return a > b;
  }
}

template <typename T>
__device__ __forceinline__ bool less(T a, T b) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return __hlt(a, b);
  } else {
    return a < b;
  }
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ static T apply(T a, T b) {
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      return __hadd(a, b);
    } else {
      using A = typename Arith<T>::type;
      return static_cast<T>(static_cast<A>(static_cast<A>(a) + static_cast<A>(b)));
    }
  }
  __device__ __forceinline__ static __half2 apply2(__half2 a, __half2 b) { return __hadd2(a, b); }
  __device__ __forceinline__ static __nv_bfloat162 apply2(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }
  static constexpr bool kPaired = true;
};

struct ProdOp {
  template <typename T>
  __device__ __forceinline__ static T apply(T a, T b) {
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      return __hmul(a, b);
    } else {
      using A = typename Arith<T>::type;
      return static_cast<T>(static_cast<A>(static_cast<A>(a) * static_cast<A>(b)));
    }
  }
  __device__ __forceinline__ static __half2 apply2(__half2 a, __half2 b) { return __hmul2(a, b); }
  __device__ __forceinline__ static __nv_bfloat162 apply2(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmul2(a, b); }
  static constexpr bool kPaired = true;
};

// Max and Min propagate a NaN from either side, like the host's (a > b || a != a) ? a : b.
struct MaxOp {
  template <typename T>
  __device__ __forceinline__ static T apply(T a, T b) {
    return (greater(a, b) || isNan(a)) ? a : b;
  }
  static constexpr bool kPaired = false;
};

struct MinOp {
  template <typename T>
  __device__ __forceinline__ static T apply(T a, T b) {
    return (less(a, b) || isNan(a)) ? a : b;
  }
  static constexpr bool kPaired = false;
};

// x / divisor with the host's rounding: floating types divide truly (fp16 and bf16 through float, rounded to
// nearest-even); integers truncate, with C++'s usual conversions of x / int.
template <typename T>
__device__ __forceinline__ T divide(T x, int divisor) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(__half2float(x) / static_cast<float>(divisor));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(__bfloat162float(x) / static_cast<float>(divisor));
  } else if constexpr (std::is_floating_point_v<T>) {
    return x / static_cast<T>(divisor);
  } else {
    return static_cast<T>(x / divisor);
  }
}

// ---- 16-byte vectors ----------------------------------------------------------------------------------------

template <typename T>
struct Vec {
  static constexpr int kElems = 16 / sizeof(T);
};

// One 16-byte vector of each input, combined element by element (fp16/bf16 Sum and Prod: two at a time). The
// copies in and out of the arrays are register moves once inlined.
template <typename T, typename O>
__device__ __forceinline__ uint4 applyVec(uint4 x, uint4 y, int divisor) {
  constexpr int kElems = Vec<T>::kElems;
  constexpr bool kHalfPair = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
  T r[kElems];
  if constexpr (kHalfPair && O::kPaired) {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    static_assert(sizeof(T2) == 4, "a pair of 16-bit floats");
    T2 pa[4], pb[4], pr[4];
    memcpy(pa, &x, 16);
    memcpy(pb, &y, 16);
#pragma unroll
    for (int k = 0; k < 4; ++k) pr[k] = O::apply2(pa[k], pb[k]);
    memcpy(r, pr, 16);
  } else {
    T a[kElems], b[kElems];
    memcpy(a, &x, 16);
    memcpy(b, &y, 16);
#pragma unroll
    for (int k = 0; k < kElems; ++k) r[k] = O::template apply<T>(a[k], b[k]);
  }
  if (divisor > 1) {
#pragma unroll
    for (int k = 0; k < kElems; ++k) r[k] = divide(r[k], divisor);
  }
  uint4 out;
  memcpy(&out, r, 16);
  return out;
}

// ---- The kernel ---------------------------------------------------------------------------------------------

template <typename T, typename O>
__global__ void __launch_bounds__(kThreads)
    reduceKernel(T* dst, T* dst2, const T* a, const T* b, size_t count, int divisor, bool vectorised) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int kElems = Vec<T>::kElems;
  size_t done = 0;
  if (vectorised) {
    const size_t nvec = count / kElems;
    const uint4* av = reinterpret_cast<const uint4*>(a);
    const uint4* bv = reinterpret_cast<const uint4*>(b);
    uint4* dv = reinterpret_cast<uint4*>(dst);
    uint4* d2v = reinterpret_cast<uint4*>(dst2);
    size_t i = tid;
    for (; i + (kUnroll - 1) * stride < nvec; i += kUnroll * stride) {
      uint4 x[kUnroll], y[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        x[u] = av[i + u * stride];
        y[u] = bv[i + u * stride];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        uint4 r = applyVec<T, O>(x[u], y[u], divisor);
        dv[i + u * stride] = r;
        if (d2v) d2v[i + u * stride] = r;
      }
    }
    for (; i < nvec; i += stride) {
      uint4 r = applyVec<T, O>(av[i], bv[i], divisor);
      dv[i] = r;
      if (d2v) d2v[i] = r;
    }
    done = nvec * kElems;
  }
  for (size_t i = done + tid; i < count; i += stride) {
    T r = O::template apply<T>(a[i], b[i]);
    if (divisor > 1) r = divide(r, divisor);
    dst[i] = r;
    if (dst2) dst2[i] = r;
  }
}

// ---- Launch -------------------------------------------------------------------------------------------------

int multiprocessors() {
  constexpr int kMaxDevices = 64;
  static int cached[kMaxDevices] = {};  // 0: not asked yet (benign race: every writer stores the same value)
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 80;
  }
  if (dev >= 0 && dev < kMaxDevices && cached[dev] > 0) return cached[dev];
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) {
    cudaGetLastError();
    sms = 80;
  }
  if (dev >= 0 && dev < kMaxDevices) cached[dev] = sms;
  return sms;
}

bool aligned16(const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T, typename O>
cudaError_t launchTyped(void* dst, void* dst2, const void* a, const void* b, size_t count, int divisor,
                        cudaStream_t stream) {
  const bool vectorised = aligned16(dst) && aligned16(dst2) && aligned16(a) && aligned16(b);
  const size_t kElems = Vec<T>::kElems;
  // Work items: whole vectors plus the scalar tail (or every element), kUnroll vectors per thread and pass.
  const size_t items = vectorised ? (count / kElems + kUnroll - 1) / kUnroll + count % kElems : count;
  const size_t wanted = (items + kThreads - 1) / kThreads;
  const size_t cap = static_cast<size_t>(multiprocessors()) * 4;  // 4 blocks of 512 threads per SM: a full SM
  const unsigned blocks = static_cast<unsigned>(wanted < cap ? (wanted > 0 ? wanted : 1) : cap);
  reduceKernel<T, O><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<T*>(dst2),
                                                      static_cast<const T*>(a), static_cast<const T*>(b), count,
                                                      divisor, vectorised);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launchOp(void* dst, void* dst2, const void* a, const void* b, size_t count, int op, int divisor,
                     cudaStream_t stream) {
  switch (op) {
    case kSum:
    case kAvg:
      return launchTyped<T, SumOp>(dst, dst2, a, b, count, divisor, stream);
    case kProd:
      return launchTyped<T, ProdOp>(dst, dst2, a, b, count, divisor, stream);
    case kMax:
      return launchTyped<T, MaxOp>(dst, dst2, a, b, count, divisor, stream);
    case kMin:
      return launchTyped<T, MinOp>(dst, dst2, a, b, count, divisor, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

size_t elementSize(int type) {
  switch (type) {
    case kInt8:
    case kUint8:
      return 1;
    case kHalf:
    case kBf16:
      return 2;
    case kInt32:
    case kUint32:
    case kFloat:
      return 4;
    case kInt64:
    case kUint64:
    case kDouble:
      return 8;
    default:
      return 0;
  }
}

cudaError_t launchReduce(void* dst, void* dst2, const void* a, const void* b, size_t count, int type, int op,
                         int divisor, cudaStream_t stream) {
  if (elementSize(type) == 0 || op < kSum || op > kAvg) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (!dst || !a || !b) return cudaErrorInvalidValue;
  switch (type) {
    case kInt8:
      return launchOp<int8_t>(dst, dst2, a, b, count, op, divisor, stream);
    case kUint8:
      return launchOp<uint8_t>(dst, dst2, a, b, count, op, divisor, stream);
    case kInt32:
      return launchOp<int32_t>(dst, dst2, a, b, count, op, divisor, stream);
    case kUint32:
      return launchOp<uint32_t>(dst, dst2, a, b, count, op, divisor, stream);
    case kInt64:
      return launchOp<int64_t>(dst, dst2, a, b, count, op, divisor, stream);
    case kUint64:
      return launchOp<uint64_t>(dst, dst2, a, b, count, op, divisor, stream);
    case kHalf:
      return launchOp<__half>(dst, dst2, a, b, count, op, divisor, stream);
    case kFloat:
      return launchOp<float>(dst, dst2, a, b, count, op, divisor, stream);
    case kDouble:
      return launchOp<double>(dst, dst2, a, b, count, op, divisor, stream);
    case kBf16:
      return launchOp<__nv_bfloat16>(dst, dst2, a, b, count, op, divisor, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace collie::cuda
