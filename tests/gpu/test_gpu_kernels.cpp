// The device reduction kernels (src/cuda/reduce_kernels.cu, called through the plugin's table) against the host
// kernels (base::reduce, base::divideInPlace): every type and op, counts around the 16-byte vector width, aligned
// and misaligned pointers, in place, the fused second destination and the Avg division. Results must equal the
// host's bit for bit, except that a NaN only has to be a NaN (payloads may differ).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/datatypes.hpp"
#include "common/data.hpp"
#include "core/cuda_plugin.hpp"
#include "gpu/gpu_test_util.hpp"

namespace collie::test {
namespace {

using gpu::DeviceMem;

// Random elements: any bits for integers; for floating types mostly values in [-100, 100] (products of two stay
// finite) with a few NaN, Inf, -0 and denormals.
void randomFill(std::vector<uint8_t>& buf, DataType t, std::mt19937_64& rng) {
  const size_t es = typeSize(t), n = buf.size() / es;
  std::uniform_real_distribution<double> uni(-100.0, 100.0);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = buf.data() + i * es;
    const int special = static_cast<int>(rng() % 64);
    const double v = special == 0   ? NAN
                     : special == 1 ? INFINITY
                     : special == 2 ? -0.0
                     : special == 3 ? 1e-41
                                    : uni(rng);
    switch (t) {
      case DataType::Float16: {
        uint16_t h = base::floatToHalf(static_cast<float>(special == 3 ? 3e-6 : v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::Bfloat16: {
        uint16_t b = base::floatToBf16(static_cast<float>(v));
        std::memcpy(p, &b, 2);
        break;
      }
      case DataType::Float32: {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::Float64:
        std::memcpy(p, &v, 8);
        break;
      default: {
        uint64_t bits = rng();
        std::memcpy(p, &bits, es);
      }
    }
  }
}

bool isNanAt(const uint8_t* p, DataType t) {
  switch (t) {
    case DataType::Float16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return std::isnan(base::halfToFloat(h));
    }
    case DataType::Bfloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return std::isnan(base::bf16ToFloat(b));
    }
    case DataType::Float32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DataType::Float64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    default:
      return false;
  }
}

// The first element where got and want differ (NaN equals NaN), or -1.
long firstMismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DataType t) {
  const size_t es = typeSize(t);
  for (size_t i = 0; i < want.size() / es; ++i) {
    const uint8_t* g = got.data() + i * es;
    const uint8_t* w = want.data() + i * es;
    if (std::memcmp(g, w, es) == 0) continue;
    if (isNanAt(g, t) && isNanAt(w, t)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

class GpuReduceKernels : public ::testing::TestWithParam<DataType> {};

TEST_P(GpuReduceKernels, MatchTheHostKernels) {
  COLLIE_SKIP_WITHOUT_GPU();
  const CollieCudaPlugin& p = core::cuda::requirePlugin("the kernel test");
  const DataType t = GetParam();
  const size_t es = typeSize(t);
  std::mt19937_64 rng(12345 + static_cast<int>(t));
  const size_t maxCount = 70001;
  const size_t pad = 64;  // room for misaligned starts
  DeviceMem da(maxCount * es + pad), db(maxCount * es + pad), dd(maxCount * es + pad), dd2(maxCount * es + pad);
  for (ReduceOp op : kAllOps) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{33}, size_t{1000}, maxCount}) {
      for (size_t shift : {size_t{0}, es}) {             // 16-byte aligned, and one element off
        for (int variant = 0; variant < 3; ++variant) {  // 0: out of place, 1: in place (dst == a) + dst2, 2: Avg end
          const int divisor = variant == 2 ? 3 : 1;
          SCOPED_TRACE(typeName(t) + " " + opName(op) + " count " + std::to_string(count) + " shift " +
                       std::to_string(shift) + " variant " + std::to_string(variant));
          std::vector<uint8_t> a(count * es), b(count * es);
          randomFill(a, t, rng);
          randomFill(b, t, rng);
          std::vector<uint8_t> want(count * es);
          base::reduce(want.data(), a.data(), b.data(), count, t, op);
          if (divisor > 1) base::divideInPlace(want.data(), count, t, divisor);
          char* pa = da.get() + shift;
          char* pb = db.get() + shift;
          char* pd = variant == 1 ? pa : dd.get() + shift;
          char* pd2 = variant == 1 ? dd2.get() + shift : nullptr;
          CUDA_ASSERT(cudaMemcpy(pa, a.data(), a.size(), cudaMemcpyHostToDevice));
          CUDA_ASSERT(cudaMemcpy(pb, b.data(), b.size(), cudaMemcpyHostToDevice));
          int rc = p.reduce(pd, pd2, pa, pb, count, static_cast<int>(t), static_cast<int>(op), divisor, nullptr);
          ASSERT_EQ(rc, 0) << p.errorString(rc);
          CUDA_ASSERT(cudaDeviceSynchronize());
          std::vector<uint8_t> got(count * es);
          CUDA_ASSERT(cudaMemcpy(got.data(), pd, got.size(), cudaMemcpyDeviceToHost));
          EXPECT_EQ(firstMismatch(got, want, t), -1);
          if (pd2) {
            CUDA_ASSERT(cudaMemcpy(got.data(), pd2, got.size(), cudaMemcpyDeviceToHost));
            EXPECT_EQ(firstMismatch(got, want, t), -1) << "the fused second destination";
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuReduceKernels, ::testing::ValuesIn(kAllTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) { return typeName(info.param); });

TEST(GpuReduceKernelsArgs, BadTypeOrOpIsRefused) {
  COLLIE_SKIP_WITHOUT_GPU();
  const CollieCudaPlugin& p = core::cuda::requirePlugin("the kernel test");
  DeviceMem d(64);
  EXPECT_NE(p.reduce(d.get(), nullptr, d.get(), d.get(), 4, 42, 0, 1, nullptr), 0);
  EXPECT_NE(p.reduce(d.get(), nullptr, d.get(), d.get(), 4, 7, 42, 1, nullptr), 0);
  EXPECT_EQ(p.reduce(d.get(), nullptr, d.get(), d.get(), 0, 7, 0, 1, nullptr), 0) << "count 0 is a no-op";
}

}  // namespace
}  // namespace collie::test
