// Device reduction kernels (reduce_kernels.cu): host-side entry points, for the plugin and the benchmarks only.
// This header includes the CUDA runtime API; libcollie never includes it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace collie::cuda {

/// Enqueues on stream: dst[i] = a[i] op b[i] for i < count, also stored to dst2 when it is not null (fused
/// reduce-and-copy). type and op are collieDataType_t and collieRedOp_t values; Avg reduces as Sum. When
/// divisor > 1 each result is divided by it before it is stored (the last step of an Avg). The arithmetic is the
/// host's (src/base/datatypes.hpp): integer Sum and Prod wrap, floating Max and Min propagate NaN, fp16 and bf16
/// are computed natively and rounded to nearest-even, the division is a true division for floating types
/// (through float for fp16/bf16) and truncating for integers. dst and dst2 may equal a or b, but must not overlap
/// them any other way. Runs 16-byte vector loads and stores when every pointer is 16-byte aligned, else
/// element by element. Returns cudaErrorInvalidValue for a bad type or op, else the launch's error.
cudaError_t launchReduce(void* dst, void* dst2, const void* a, const void* b, size_t count, int type, int op,
                         int divisor, cudaStream_t stream);

/// Bytes per element of a collieDataType_t value; 0 for an invalid one.
size_t elementSize(int type);

}  // namespace collie::cuda
