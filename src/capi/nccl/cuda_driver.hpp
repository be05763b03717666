// The little of CUDA that libnccl.so.2 (src/capi/nccl/) needs itself, through the driver API of the process.
//
// libnccl.so.2 links nothing of CUDA. A program built for NCCL that uses GPUs has loaded the driver
// (libcuda.so.1) already, through its own CUDA runtime, static or shared; one that has not cannot hold device
// memory at all. So CUDA is used only when libcuda.so.1 is already loaded (dlopen with RTLD_NOLOAD): never is a
// driver loaded or CUDA initialised on behalf of a host-only program. The driver, unlike a runtime, is one per
// process, so what it reports (the current context's device, allocations) is the program's own view.
//
// Used for ncclCommCuDevice (the device of the caller's current context when a communicator is created) and
// ncclMemAlloc / ncclMemFree (device memory when CUDA is in use, else page-aligned host memory).
#pragma once

#include <cstddef>
#include <string>

namespace collie_nccl {

/// True when the CUDA driver (libcuda.so.1) is loaded in this process.
bool cudaDriverLoaded();

/// The CUDA device of the calling thread: the device of its current context, or 0 (the CUDA runtime's default
/// device) when the driver is loaded but no context is current. -1 when the driver is not loaded (no CUDA in use).
int currentCudaDevice();

/// cuMemAlloc on the caller's current context (device 0's primary context when none is current, as the CUDA
/// runtime would pick). Returns false with a message in *why on failure, or when the driver is not loaded.
bool cudaDeviceAlloc(void** ptr, size_t size, std::string* why);
/// cuMemFree of a pointer from cudaDeviceAlloc. Returns false with a message in *why on failure.
bool cudaDeviceFree(void* ptr, std::string* why);

}  // namespace collie_nccl
