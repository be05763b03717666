// The CUDA plugin: a C-ABI function table between libcollie and libcollie_cuda.so (src/cuda/), so that libcollie
// never links the CUDA runtime and no host-only file includes a CUDA header.
//
// libcollie loads the plugin with dlopen only when CUDA can matter: a stream was passed, or the CUDA driver
// (libcuda.so.1) is already loaded in this process, the only way device buffers can exist. Host calls in a
// process that never touched CUDA never load it. The plugin is looked up as, in order: $COLLIE_CUDA_PLUGIN, then
// libcollie_cuda.so next to the object holding libcollie's code (libcollie.so, or the program linking
// libcollie.a), then by plain name (the dynamic linker's search). The plugin links the CUDA runtime statically
// and exports one symbol, collieCudaPluginGet, which fills the table.
//
// Every function returns a CUDA error code (0 is success; the text comes from errorString). Streams, events and
// devices are plain pointers and ints here: cudaStream_t, cudaEvent_t and device ordinals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" {

/// Bumped on any change to CollieCudaPlugin that an older libcollie cannot read.
#define COLLIE_CUDA_PLUGIN_ABI 1
/// The symbol libcollie looks up: int collieCudaPluginGet(unsigned abi, CollieCudaPlugin* table, size_t size).
#define COLLIE_CUDA_PLUGIN_SYMBOL "collieCudaPluginGet"

/// What a pointer points at, as the driver's cuPointerGetAttributes sees it (asking creates no CUDA context).
enum CollieCudaMemory : int {
  kCollieCudaMemoryPageable = 0,  ///< ordinary host memory, unknown to CUDA
  kCollieCudaMemoryPinned = 1,    ///< page-locked host memory (cudaHostAlloc / cudaHostRegister)
  kCollieCudaMemoryDevice = 2,    ///< device memory (cudaMalloc)
  kCollieCudaMemoryManaged = 3,   ///< managed memory (cudaMallocManaged)
};

struct CollieCudaPlugin {
  uint32_t size;       ///< sizeof(CollieCudaPlugin) of the plugin
  uint32_t abi;        ///< COLLIE_CUDA_PLUGIN_ABI of the plugin
  int runtimeVersion;  ///< CUDART_VERSION the plugin was built with
  const char* archs;   ///< the GPU architectures compiled in ("sm_80 sm_90 compute_90")

  // ---- Errors and devices
  const char* (*errorString)(int err);  ///< "cudaErrorNoDevice: no CUDA-capable device is detected"
  int (*driverVersion)(int* version);   ///< 0 when no driver is installed
  int (*deviceCount)(int* count);
  int (*getDevice)(int* device);
  int (*setDevice)(int device);
  /// The kind of memory at ptr (a CollieCudaMemory) and, for device and managed memory, its device.
  int (*pointerKind)(const void* ptr, int* kind, int* device);

  // ---- Streams and events (streams are created non-blocking: they never wait on the legacy default stream)
  int (*streamCreate)(void** stream);
  int (*streamDestroy)(void* stream);
  int (*streamSynchronize)(void* stream);
  int (*eventCreate)(void** event);  ///< without timing
  int (*eventDestroy)(void* event);
  int (*eventRecord)(void* event, void* stream);
  /// 0 when the event has completed, 600 (cudaErrorNotReady) while not, else the error.
  int (*eventQuery)(void* event);
  int (*eventSynchronize)(void* event);
  int (*streamWaitEvent)(void* stream, void* event);
  /// Enqueues on stream: wait until the 32-bit word at hostFlag (in memory from hostAlloc) is >= value, compared
  /// cyclically ((int32_t)(*flag - value) >= 0). The host releases the stream by storing the value.
  int (*streamWaitFlag)(void* stream, uint32_t* hostFlag, uint32_t value);

  // ---- Memory
  /// cudaMemcpyAsync with cudaMemcpyDefault (any pair of host, pinned, device and managed memory).
  int (*memcpyAsync)(void* dst, const void* src, size_t bytes, void* stream);
  /// Page-locked host memory, mapped into every device's address space and usable from every context.
  int (*hostAlloc)(void** ptr, size_t bytes);
  int (*hostFree)(void* ptr);
  int (*deviceAlloc)(void** ptr, size_t bytes);
  int (*deviceFree)(void* ptr);

  // ---- Reductions on the device (src/cuda/reduce_kernels.cu); type and op are collieDataType_t/collieRedOp_t
  /// dst[i] = a[i] op b[i], and dst2[i] too when dst2 is not null (fused reduce-and-copy); when divisor > 1 the
  /// result is divided by it first (the end of an Avg, with the host's rounding). Avg reduces as Sum. dst and
  /// dst2 may equal a or b, never overlap them partially.
  int (*reduce)(void* dst, void* dst2, const void* a, const void* b, size_t count, int type, int op, int divisor,
                void* stream);

  // ---- Inter-process memory (cuda_ipc)
  /// Writes a cudaIpcMemHandle_t (64 bytes) for device memory from deviceAlloc.
  int (*ipcGetHandle)(void* handle64, void* devicePtr);
  int (*ipcOpenHandle)(void** devicePtr, const void* handle64);
  int (*ipcCloseHandle)(void* devicePtr);
  /// Lets the current device access peer's memory (cudaDeviceEnablePeerAccess; already enabled is success).
  int (*enablePeerAccess)(int peer);
};

typedef int (*CollieCudaPluginGetFn)(unsigned abi, CollieCudaPlugin* table, size_t size);

}  // extern "C"

namespace collie::core::cuda {

/// cudaErrorNotReady, as eventQuery returns it.
inline constexpr int kNotReady = 600;

/// True when libcuda.so.1 is loaded in this process (cheap: re-checked only after a library was loaded).
bool driverLoaded();

/// The plugin, loading it on first use; null when it cannot be loaded, with the reason in *why.
const CollieCudaPlugin* plugin(std::string* why = nullptr);

/// The plugin if a previous call loaded it, else null; never loads anything.
const CollieCudaPlugin* loadedPlugin();

/// The plugin, or throws: InvalidUsage when it cannot be loaded (`what` says what needed it), UnhandledCudaError
/// when no CUDA device can be used (the CUDA error named).
const CollieCudaPlugin& requirePlugin(const char* what);

/// Throws UnhandledCudaError "<what> failed: <cuda error>" when err is not 0.
void check(int err, const char* what);

/// The memory kind of ptr: Pageable when the plugin is not loaded and the driver is not in this process.
int memoryKind(const void* ptr, int* device);

/// "device memory on GPU 0", "pinned host memory", ...
std::string memoryKindName(int kind, int device);

}  // namespace collie::core::cuda
