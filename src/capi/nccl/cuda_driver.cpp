// The CUDA driver of the process, as libnccl.so.2 uses it: see cuda_driver.hpp.
//
// The driver's entry points are looked up with dlsym in an already loaded libcuda.so.1 (RTLD_NOLOAD), never
// linked; cuda.h is included for their types only. A loaded driver is never unloaded in practice, so the table is
// filled once, the first time the driver is seen; until then every call checks again (a program may initialise
// CUDA after its first NCCL call).
#include "cuda_driver.hpp"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <mutex>

namespace collie_nccl {
namespace {

struct Driver {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuGetErrorString) errorString = nullptr;
  decltype(&::cuCtxGetCurrent) ctxGetCurrent = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&::cuCtxGetDevice) ctxGetDevice = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primaryCtxRetain = nullptr;
  decltype(&::cuMemAlloc) memAlloc = nullptr;  // cuMemAlloc_v2
  decltype(&::cuMemFree) memFree = nullptr;    // cuMemFree_v2
};

std::mutex driverMu;
Driver driverTable;
bool driverReady = false;

template <typename F>
bool lookup(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

// The driver's table, or nullptr while libcuda.so.1 is not loaded (or lacks an entry point we need).
const Driver* driver() {
  std::lock_guard<std::mutex> lock(driverMu);
  if (driverReady) return &driverTable;
  void* lib = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (!lib) return nullptr;
  // The reference RTLD_NOLOAD took is kept: the table points into the library.
  Driver d;
  bool ok = lookup(lib, "cuInit", &d.init) && lookup(lib, "cuGetErrorString", &d.errorString) &&
            lookup(lib, "cuCtxGetCurrent", &d.ctxGetCurrent) && lookup(lib, "cuCtxSetCurrent", &d.ctxSetCurrent) &&
            lookup(lib, "cuCtxGetDevice", &d.ctxGetDevice) &&
            lookup(lib, "cuDevicePrimaryCtxRetain", &d.primaryCtxRetain) && lookup(lib, "cuMemAlloc_v2", &d.memAlloc) &&
            lookup(lib, "cuMemFree_v2", &d.memFree);
  if (!ok) {
    dlclose(lib);
    return nullptr;
  }
  driverTable = d;
  driverReady = true;
  return &driverTable;
}

std::string errorText(const Driver& d, const char* what, CUresult r) {
  const char* s = nullptr;
  if (d.errorString(r, &s) != CUDA_SUCCESS || !s) s = "unknown CUDA driver error";
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s failed: %s (CUresult %d)", what, s, static_cast<int>(r));
  return buf;
}

// Makes a context current on this thread when none is: device 0's primary context, as the CUDA runtime does.
bool ensureContext(const Driver& d, std::string* why) {
  CUresult r = d.init(0);
  if (r != CUDA_SUCCESS) {
    *why = errorText(d, "cuInit", r);
    return false;
  }
  CUcontext ctx = nullptr;
  r = d.ctxGetCurrent(&ctx);
  if (r != CUDA_SUCCESS) {
    *why = errorText(d, "cuCtxGetCurrent", r);
    return false;
  }
  if (ctx) return true;
  r = d.primaryCtxRetain(&ctx, 0);
  if (r != CUDA_SUCCESS) {
    *why = errorText(d, "cuDevicePrimaryCtxRetain(device 0)", r);
    return false;
  }
  r = d.ctxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    *why = errorText(d, "cuCtxSetCurrent", r);
    return false;
  }
  return true;
}

}  // namespace

bool cudaDriverLoaded() { return driver() != nullptr; }

int currentCudaDevice() {
  const Driver* d = driver();
  if (!d) return -1;
  CUcontext ctx = nullptr;
  if (d->ctxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return 0;  // not initialised yet, or no context: device 0
  CUdevice dev = 0;
  if (d->ctxGetDevice(&dev) != CUDA_SUCCESS) return 0;
  return static_cast<int>(dev);
}

bool cudaDeviceAlloc(void** ptr, size_t size, std::string* why) {
  const Driver* d = driver();
  if (!d) {
    *why = "the CUDA driver is not loaded in this process";
    return false;
  }
  if (!ensureContext(*d, why)) return false;
  CUdeviceptr p = 0;
  CUresult r = d->memAlloc(&p, size);
  if (r != CUDA_SUCCESS) {
    *why = errorText(*d, "cuMemAlloc", r);
    return false;
  }
  *ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  return true;
}

bool cudaDeviceFree(void* ptr, std::string* why) {
  const Driver* d = driver();
  if (!d) {
    *why = "the CUDA driver is not loaded in this process";
    return false;
  }
  CUresult r = d->memFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)));
  if (r != CUDA_SUCCESS) {
    *why = errorText(*d, "cuMemFree", r);
    return false;
  }
  return true;
}

}  // namespace collie_nccl
