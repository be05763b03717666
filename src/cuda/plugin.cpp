// libcollie_cuda.so: fills the CollieCudaPlugin table (src/core/cuda_plugin.hpp) with thin wrappers of the CUDA
// runtime, which is linked in statically. Only collieCudaPluginGet is exported (plugin.map), so the runtime's
// own symbols can never bind to another copy of the runtime in the process.
//
// Pointer kinds come from the driver's cuPointerGetAttributes (no runtime initialisation, no context), the rest
// from the runtime. Every wrapper returns the CUDA error code and clears the runtime's last-error state on failure, so
// that one failed query (a pointer CUDA does not know, say) is not reported again by a later, unrelated call.
// cuStreamWaitValue32 comes from the driver through cudaGetDriverEntryPointByVersion; driver errors are
// returned as kDriverErrorBase + CUresult and named by errorString like runtime errors.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/cuda_plugin.hpp"
#include "cuda/reduce_kernels.hpp"

#ifndef COLLIE_CUDA_ARCHS
#define COLLIE_CUDA_ARCHS "unknown"
#endif

namespace {

constexpr int kDriverErrorBase = 1 << 20;

int ret(cudaError_t e) {
  if (e != cudaSuccess) cudaGetLastError();
  return static_cast<int>(e);
}

// ---- Driver entry points -----------------------------------------------------------------------------------

using WaitValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using ErrorStringFn = CUresult (*)(CUresult, const char**);

struct Driver {
  WaitValue32Fn waitValue32 = nullptr;
  ErrorStringFn errorName = nullptr;
  ErrorStringFn errorString = nullptr;
  cudaError_t status = cudaSuccess;
};

template <typename F>
cudaError_t entryPoint(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess) return e;
  if (q != cudaDriverEntryPointSuccess || !p) return cudaErrorSymbolNotFound;
  *fn = reinterpret_cast<F>(p);
  return cudaSuccess;
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    entryPoint("cuGetErrorName", &d.errorName);
    entryPoint("cuGetErrorString", &d.errorString);
    d.status = entryPoint("cuStreamWaitValue32", &d.waitValue32);
    cudaGetLastError();
  });
  return d;
}

// ---- The table ----------------------------------------------------------------------------------------------

const char* errorString(int err) {
  // One buffer per thread: the text stays valid until this thread's next call.
  thread_local char text[256];
  if (err >= kDriverErrorBase) {
    const Driver& d = driver();
    const char* name = nullptr;
    const char* what = nullptr;
    auto r = static_cast<CUresult>(err - kDriverErrorBase);
    if (d.errorName) d.errorName(r, &name);
    if (d.errorString) d.errorString(r, &what);
    std::snprintf(text, sizeof(text), "%s: %s (CUDA driver error %d)", name ? name : "CUDA_ERROR",
                  what ? what : "unknown", static_cast<int>(r));
    return text;
  }
  auto e = static_cast<cudaError_t>(err);
  std::snprintf(text, sizeof(text), "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  return text;
}

int driverVersion(int* version) { return ret(cudaDriverGetVersion(version)); }
int deviceCount(int* count) {
  *count = 0;
  return ret(cudaGetDeviceCount(count));
}
int getDevice(int* device) { return ret(cudaGetDevice(device)); }
int setDevice(int device) { return ret(cudaSetDevice(device)); }

// cuPointerGetAttributes from the driver already loaded in the process: unlike cudaPointerGetAttributes it
// initialises no runtime and creates no context, so asking about the host buffers of a process that uses CUDA
// for something else costs no GPU memory. Null when the driver is not loaded.
using PointerAttributesFn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);
PointerAttributesFn pointerAttributes() {
  static PointerAttributesFn fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return lib ? reinterpret_cast<PointerAttributesFn>(dlsym(lib, "cuPointerGetAttributes")) : nullptr;
  }();
  return fn;
}

int pointerKind(const void* ptr, int* kind, int* device) {
  *kind = kCollieCudaMemoryPageable;
  *device = -1;
  if (PointerAttributesFn fn = pointerAttributes()) {
    unsigned int memoryType = 0, managed = 0;
    int ordinal = -1;
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void* data[3] = {&memoryType, &managed, &ordinal};
    CUresult r = fn(3, attrs, data, reinterpret_cast<CUdeviceptr>(ptr));
    if (r == CUDA_ERROR_NOT_INITIALIZED || r == CUDA_ERROR_INVALID_VALUE) return 0;  // no CUDA memory here
    if (r != CUDA_SUCCESS) return kDriverErrorBase + static_cast<int>(r);
    if (managed != 0) {
      *kind = kCollieCudaMemoryManaged;
      *device = ordinal;
    } else if (memoryType == CU_MEMORYTYPE_HOST) {
      *kind = kCollieCudaMemoryPinned;
    } else if (memoryType == CU_MEMORYTYPE_DEVICE || memoryType == CU_MEMORYTYPE_ARRAY) {
      *kind = kCollieCudaMemoryDevice;
      *device = ordinal;
    }
    return 0;
  }
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, ptr);
  if (e == cudaErrorInvalidValue) {  // a pointer CUDA does not know (older drivers): host memory
    cudaGetLastError();
    return 0;
  }
  if (e != cudaSuccess) return ret(e);
  switch (a.type) {
    case cudaMemoryTypeHost:
      *kind = kCollieCudaMemoryPinned;
      break;
    case cudaMemoryTypeDevice:
      *kind = kCollieCudaMemoryDevice;
      *device = a.device;
      break;
    case cudaMemoryTypeManaged:
      *kind = kCollieCudaMemoryManaged;
      *device = a.device;
      break;
    default:
      break;
  }
  return 0;
}

int streamCreate(void** stream) {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = s;
  return ret(e);
}
int streamDestroy(void* stream) { return ret(cudaStreamDestroy(static_cast<cudaStream_t>(stream))); }
int streamSynchronize(void* stream) { return ret(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

int eventCreate(void** event) {
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  *event = ev;
  return ret(e);
}
int eventDestroy(void* event) { return ret(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }
int eventRecord(void* event, void* stream) {
  return ret(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
int eventQuery(void* event) { return ret(cudaEventQuery(static_cast<cudaEvent_t>(event))); }
int eventSynchronize(void* event) { return ret(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }
int streamWaitEvent(void* stream, void* event) {
  return ret(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

int streamWaitFlag(void* stream, uint32_t* hostFlag, uint32_t value) {
  const Driver& d = driver();
  if (!d.waitValue32) return ret(d.status != cudaSuccess ? d.status : cudaErrorSymbolNotFound);
  void* devicePtr = nullptr;
  cudaError_t e = cudaHostGetDevicePointer(&devicePtr, hostFlag, 0);
  if (e != cudaSuccess) return ret(e);
  CUresult r = d.waitValue32(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(devicePtr), value,
                             CU_STREAM_WAIT_VALUE_GEQ);
  return r == CUDA_SUCCESS ? 0 : kDriverErrorBase + static_cast<int>(r);
}

int memcpyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return 0;
  return ret(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}
int hostAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  return ret(cudaHostAlloc(ptr, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
}
int hostFree(void* ptr) { return ret(cudaFreeHost(ptr)); }
int deviceAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  return ret(cudaMalloc(ptr, bytes));
}
int deviceFree(void* ptr) { return ret(cudaFree(ptr)); }

int reduce(void* dst, void* dst2, const void* a, const void* b, size_t count, int type, int op, int divisor,
           void* stream) {
  return ret(collie::cuda::launchReduce(dst, dst2, a, b, count, type, op, divisor, static_cast<cudaStream_t>(stream)));
}

int ipcGetHandle(void* handle64, void* devicePtr) {
  static_assert(sizeof(cudaIpcMemHandle_t) == 64, "cudaIpcMemHandle_t is 64 bytes");
  cudaIpcMemHandle_t h{};
  cudaError_t e = cudaIpcGetMemHandle(&h, devicePtr);
  if (e == cudaSuccess) std::memcpy(handle64, &h, sizeof(h));
  return ret(e);
}
int ipcOpenHandle(void** devicePtr, const void* handle64) {
  cudaIpcMemHandle_t h{};
  std::memcpy(&h, handle64, sizeof(h));
  *devicePtr = nullptr;
  return ret(cudaIpcOpenMemHandle(devicePtr, h, cudaIpcMemLazyEnablePeerAccess));
}
int ipcCloseHandle(void* devicePtr) { return ret(cudaIpcCloseMemHandle(devicePtr)); }
int enablePeerAccess(int peer) {
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return 0;
  }
  return ret(e);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int collieCudaPluginGet(unsigned abi, CollieCudaPlugin* table,
                                                                          size_t size) {
  if (!table || size < sizeof(CollieCudaPlugin)) return 1;
  CollieCudaPlugin t{};
  t.size = sizeof(CollieCudaPlugin);
  t.abi = COLLIE_CUDA_PLUGIN_ABI;
  if (abi != COLLIE_CUDA_PLUGIN_ABI) {
    std::memcpy(table, &t, sizeof(t));  // tells the caller which ABI this plugin has
    return 1;
  }
  t.runtimeVersion = CUDART_VERSION;
  t.archs = COLLIE_CUDA_ARCHS;
  t.errorString = errorString;
  t.driverVersion = driverVersion;
  t.deviceCount = deviceCount;
  t.getDevice = getDevice;
  t.setDevice = setDevice;
  t.pointerKind = pointerKind;
  t.streamCreate = streamCreate;
  t.streamDestroy = streamDestroy;
  t.streamSynchronize = streamSynchronize;
  t.eventCreate = eventCreate;
  t.eventDestroy = eventDestroy;
  t.eventRecord = eventRecord;
  t.eventQuery = eventQuery;
  t.eventSynchronize = eventSynchronize;
  t.streamWaitEvent = streamWaitEvent;
  t.streamWaitFlag = streamWaitFlag;
  t.memcpyAsync = memcpyAsync;
  t.hostAlloc = hostAlloc;
  t.hostFree = hostFree;
  t.deviceAlloc = deviceAlloc;
  t.deviceFree = deviceFree;
  t.reduce = reduce;
  t.ipcGetHandle = ipcGetHandle;
  t.ipcOpenHandle = ipcOpenHandle;
  t.ipcCloseHandle = ipcCloseHandle;
  t.enablePeerAccess = enablePeerAccess;
  std::memcpy(table, &t, sizeof(t));
  return 0;
}
