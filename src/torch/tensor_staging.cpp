// Tensor staging for the torch backend: dtype and reduce-op mapping, contiguous copies, complex views, byte copies
// (tensor_staging.hpp).
#include "tensor_staging.hpp"

#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstring>

namespace collie::torchbackend {

namespace {

bool isComplex(at::ScalarType t) { return t == at::kComplexFloat || t == at::kComplexDouble || t == at::kComplexHalf; }

// collie's element type for a (real) torch dtype, or false when collie has none.
bool collieType(at::ScalarType t, DataType& out) {
  switch (t) {
    case at::kFloat:
      out = DataType::Float32;
      return true;
    case at::kDouble:
      out = DataType::Float64;
      return true;
    case at::kHalf:
      out = DataType::Float16;
      return true;
    case at::kBFloat16:
      out = DataType::Bfloat16;
      return true;
    case at::kInt:
      out = DataType::Int32;
      return true;
    case at::kLong:
      out = DataType::Int64;
      return true;
    case at::kChar:
      out = DataType::Int8;
      return true;
    case at::kByte:
    case at::kBool:
      out = DataType::Uint8;
      return true;
    default:
      return false;
  }
}

Staged stageContiguous(const at::Tensor& t) {
  Staged s;
  s.original = t;
  s.contig = t.is_contiguous() ? t : t.contiguous();
  s.data = s.contig;
  return s;
}

}  // namespace

void Staged::copyBack() const {
  if (!contig.is_same(original)) const_cast<at::Tensor&>(original).copy_(contig);
}

void checkCpuDense(const at::Tensor& t, const std::string& what) {
  TORCH_CHECK(t.defined(), "collie: ", what, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "collie: ", what, " is on ", t.device().str(),
              "; the collie torch backend takes CPU tensors only");
  TORCH_CHECK(t.layout() == at::kStrided, "collie: ", what, " is not a dense (strided) tensor");
}

Staged stageBytes(const at::Tensor& t, const std::string& what) {
  checkCpuDense(t, what);
  Staged s = stageContiguous(t);
  s.type = DataType::Uint8;
  s.count = byteSize(s.contig);
  return s;
}

Staged stageTyped(const at::Tensor& t, const std::string& what) {
  checkCpuDense(t, what);
  Staged s = stageContiguous(t);
  at::ScalarType real = t.scalar_type();
  if (isComplex(real)) {
    s.data = at::view_as_real(s.contig);
    real = s.data.scalar_type();
  }
  TORCH_CHECK(collieType(real, s.type), "collie: ", what, " has dtype ", c10::toString(t.scalar_type()),
              ", which collie cannot reduce (it reduces float32/64, float16, bfloat16, int8/32/64, uint8, bool and "
              "complex for sum/avg)");
  s.count = static_cast<size_t>(s.data.numel());
  return s;
}

ReduceOp reductionFor(const c10d::ReduceOp& op, at::ScalarType dtype, const std::string& what) {
  const bool isBool = dtype == at::kBool;
  const c10d::ReduceOp::RedOpType kind = op.op_;
  if (isComplex(dtype)) {
    TORCH_CHECK(kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::AVG || kind == c10d::ReduceOp::PREMUL_SUM,
                "collie: ", what, ": complex tensors support SUM, AVG and PREMUL_SUM only (as their real parts)");
  }
  switch (kind) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return isBool ? ReduceOp::Max : ReduceOp::Sum;
    case c10d::ReduceOp::PRODUCT:
      return isBool ? ReduceOp::Min : ReduceOp::Prod;
    case c10d::ReduceOp::MIN:
      return ReduceOp::Min;
    case c10d::ReduceOp::MAX:
      return ReduceOp::Max;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool, "collie: ", what, ": AVG of bool tensors is undefined");
      return ReduceOp::Avg;
    case c10d::ReduceOp::BAND:
      TORCH_CHECK(isBool, "collie: ", what, ": BAND is supported on bool tensors only (collie has no bitwise ops)");
      return ReduceOp::Min;
    case c10d::ReduceOp::BOR:
      TORCH_CHECK(isBool, "collie: ", what, ": BOR is supported on bool tensors only (collie has no bitwise ops)");
      return ReduceOp::Max;
    default:
      TORCH_CHECK(false, "collie: ", what, ": reduce op ", static_cast<int>(kind),
                  " is not supported (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM)");
  }
  return ReduceOp::Sum;
}

Reduction reductionWithFactor(const c10d::ReduceOp& op, ReduceOp base, const Staged& s) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return base;
  const at::ScalarType dtype = s.original.scalar_type();
  TORCH_CHECK(at::isFloatingType(dtype) || at::isComplexType(dtype),
              "collie: PREMUL_SUM needs a floating-point tensor, got ", c10::toString(dtype));
  auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "collie: PREMUL_SUM without its factor");
  double factor = supplement->double_factor;
#if TORCH_VERSION_MAJOR >= 2  // one tensor factor; torch 1.x kept a list of them
  const at::Tensor tensorFactor = supplement->tensor_factor;
#else
  const at::Tensor tensorFactor =
      supplement->tensor_factors.empty() ? at::Tensor() : supplement->tensor_factors.front();
#endif
  if (tensorFactor.defined()) {
    TORCH_CHECK(!at::isComplexType(tensorFactor.scalar_type()), "collie: PREMUL_SUM with a complex factor (",
                c10::toString(tensorFactor.scalar_type()), ") is not supported: collie scales by a real factor");
    factor = tensorFactor.item<double>();
  }
  switch (s.type) {  // the staged type: a complex tensor's is its real part's
    case DataType::Float16:
      return Reduction::preMulSum(Half{c10::Half(static_cast<float>(factor)).x});
    case DataType::Bfloat16:
      return Reduction::preMulSum(BFloat16{c10::BFloat16(static_cast<float>(factor)).x});
    case DataType::Float32:
      return Reduction::preMulSum(static_cast<float>(factor));
    default:
      return Reduction::preMulSum(factor);
  }
}

size_t byteSize(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

void copyToBytes(const at::Tensor& t, void* dst) {
  at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  if (c.numel() > 0) std::memcpy(dst, c.data_ptr(), byteSize(c));
}

void copyFromBytes(const void* src, at::Tensor& dst) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous()) {
    std::memcpy(dst.data_ptr(), src, byteSize(dst));
    return;
  }
  dst.copy_(at::from_blob(const_cast<void*>(src), dst.sizes(), dst.options()));
}

void checkSameLayout(const std::vector<at::Tensor>& list, const at::Tensor& like, const std::string& what) {
  for (size_t i = 0; i < list.size(); ++i) {
    checkCpuDense(list[i], what + "[" + std::to_string(i) + "]");
    TORCH_CHECK(list[i].scalar_type() == like.scalar_type(), "collie: ", what, "[", i, "] has dtype ",
                c10::toString(list[i].scalar_type()), " but the input has ", c10::toString(like.scalar_type()));
    TORCH_CHECK(list[i].sizes() == like.sizes(), "collie: ", what, "[", i, "] has shape ", list[i].sizes(),
                " but the input has shape ", like.sizes());
  }
}

}  // namespace collie::torchbackend
