// Tensors as collie sees them: the torch backend (process_group_collie.cpp) hands collie contiguous host memory,
// an element count and a collie::DataType. This file maps torch dtypes and reduce ops onto collie's, makes
// contiguous staging copies of non-contiguous tensors (written back when the call is done), views complex tensors
// as their real parts (sum and average only) and moves data of any dtype as bytes where no reduction is involved.
#pragma once

#include <ATen/ATen.h>

#include <collie/collie.hpp>
#include <cstddef>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

namespace collie::torchbackend {

/// One tensor ready for collie: `data` is contiguous CPU memory holding `count` elements of `type`.
struct Staged {
  at::Tensor original;  ///< the caller's tensor
  at::Tensor contig;    ///< same dtype, contiguous: `original` itself or a copy
  at::Tensor data;      ///< what collie reads and writes: `contig`, or its real view for complex
  size_t count = 0;
  DataType type = DataType::Uint8;

  void* ptr() const { return data.data_ptr(); }
  size_t bytes() const { return static_cast<size_t>(data.numel()) * data.element_size(); }
  /// Writes a staging copy back into the caller's tensor (nothing to do when collie worked on it directly).
  void copyBack() const;
};

/// Checks that `t` is a dense CPU tensor; `what` names it in the message ("allreduce: tensor").
void checkCpuDense(const at::Tensor& t, const std::string& what);

/// For calls that only move data: the tensor's bytes, as Uint8 (any dtype).
Staged stageBytes(const at::Tensor& t, const std::string& what);

/// For reductions: the tensor in collie's matching element type (complex as real pairs). Throws for dtypes
/// collie cannot reduce (int16, ...).
Staged stageTyped(const at::Tensor& t, const std::string& what);

/// collie's reduction for torch's op on dtype `dtype` (bool: sum=max, product=min; band=min, bor=max); throws a
/// clear error for what collie has not (bitwise ops on integers, product/min/max on complex).
ReduceOp reductionFor(const c10d::ReduceOp& op, at::ScalarType dtype, const std::string& what);

/// What collie computes for torch's `op` on a tensor staged as `s`: `base` (reductionFor's), or for PREMUL_SUM
/// collie's PreMulSum with the op's factor converted to the staged type, as PyTorch's NCCL backend converts it for
/// ncclRedOpCreatePreMulSum (collie scales the input as it reduces: no copy of the tensor). Throws for a PREMUL_SUM
/// on a tensor that is not floating point or complex, or with a complex factor.
Reduction reductionWithFactor(const c10d::ReduceOp& op, ReduceOp base, const Staged& s);

/// Bytes of `t` (contiguous copy when needed) written at dst.
void copyToBytes(const at::Tensor& t, void* dst);
/// Bytes at src, laid out as a contiguous tensor like `dst`, copied into `dst`.
void copyFromBytes(const void* src, at::Tensor& dst);
/// numel * element size.
size_t byteSize(const at::Tensor& t);

/// Checks that every tensor in `list` has the dtype and shape of `like`; names the first mismatch.
void checkSameLayout(const std::vector<at::Tensor>& list, const at::Tensor& like, const std::string& what);

}  // namespace collie::torchbackend
