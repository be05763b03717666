// Loading the CUDA plugin (see cuda_plugin.hpp).
#include "core/cuda_plugin.hpp"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"

namespace collie::core::cuda {
namespace {

// dl_iterate_phdr's count of objects loaded so far, read from its first callback (a few ns, against ~17 us for a
// dlopen(RTLD_NOLOAD) of a library that is not loaded).
int readLoadCount(dl_phdr_info* info, size_t size, void* out) {
  if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
    *static_cast<unsigned long long*>(out) = info->dlpi_adds;
  return 1;  // stop after the first object
}

std::atomic<unsigned long long> checkedAtLoads{~0ull};
std::atomic<bool> driverSeen{false};

struct Loaded {
  CollieCudaPlugin table{};
  const CollieCudaPlugin* ptr = nullptr;
  std::string why;  // why it could not be loaded
};

std::atomic<const CollieCudaPlugin*> loadedTable{nullptr};

// The directory of the object that holds this code (libcollie.so, or a program linked with libcollie.a).
std::string ownDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ownDirectory), &info) == 0 || !info.dli_fname) return {};
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

Loaded load() {
  Loaded out;
  std::vector<std::string> candidates;
  const std::string& forced = base::params::cudaPlugin();
  const char* env = forced.c_str();
  if (*env) {
    candidates.push_back(forced);  // an explicit choice: nothing else is tried
  } else {
    std::string dir = ownDirectory();
    if (!dir.empty()) candidates.push_back(dir + "libcollie_cuda.so");
    candidates.push_back("libcollie_cuda.so");
  }
  std::string errors;
  void* handle = nullptr;
  for (const std::string& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
    const char* e = dlerror();
    errors += base::format("%s%s", errors.empty() ? "" : "; ", e ? e : c.c_str());
  }
  if (!handle) {
    out.why =
        base::format("the CUDA plugin libcollie_cuda.so could not be loaded (%s)%s", errors.c_str(),
                     *env ? "" : "; set COLLIE_CUDA_PLUGIN to its path, or build collie with COLLIE_WITH_CUDA=ON");
    return out;
  }
  auto get = reinterpret_cast<CollieCudaPluginGetFn>(dlsym(handle, COLLIE_CUDA_PLUGIN_SYMBOL));
  if (!get) {
    out.why = base::format("%s lacks the symbol " COLLIE_CUDA_PLUGIN_SYMBOL, candidates.front().c_str());
    return out;  // the handle stays open: closing a library with a CUDA runtime inside is not worth the risk
  }
  int rc = get(COLLIE_CUDA_PLUGIN_ABI, &out.table, sizeof(out.table));
  if (rc != 0 || out.table.abi != COLLIE_CUDA_PLUGIN_ABI || out.table.size < sizeof(CollieCudaPlugin)) {
    out.why = base::format("the CUDA plugin has ABI %u (size %u), this libcollie needs ABI %d (size %zu)",
                           out.table.abi, out.table.size, COLLIE_CUDA_PLUGIN_ABI, sizeof(CollieCudaPlugin));
    return out;
  }
  out.ptr = &out.table;
  return out;
}

Loaded& loadOnce() {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    loaded = load();
    if (loaded.ptr) {
      loaded.ptr = &loaded.table;  // load() pointed into its own copy
      loadedTable.store(loaded.ptr, std::memory_order_release);
      COLLIE_INFO(base::kLogInit, "CUDA plugin loaded (runtime %d, %s)", loaded.table.runtimeVersion,
                  loaded.table.archs);
    } else {
      COLLIE_INFO(base::kLogInit, "%s", loaded.why.c_str());
    }
  });
  return loaded;
}

}  // namespace

bool driverLoaded() {
  if (driverSeen.load(std::memory_order_relaxed)) return true;  // a loaded driver is never unloaded in practice
  unsigned long long loads = 0;
  dl_iterate_phdr(readLoadCount, &loads);
  if (loads == checkedAtLoads.load(std::memory_order_relaxed)) return false;
  void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (h) {
    dlclose(h);  // drops the reference RTLD_NOLOAD took
    driverSeen.store(true, std::memory_order_relaxed);
    return true;
  }
  checkedAtLoads.store(loads, std::memory_order_relaxed);
  return false;
}

const CollieCudaPlugin* plugin(std::string* why) {
  Loaded& l = loadOnce();
  if (!l.ptr && why) *why = l.why;
  return l.ptr;
}

const CollieCudaPlugin* loadedPlugin() { return loadedTable.load(std::memory_order_acquire); }

const CollieCudaPlugin& requirePlugin(const char* what) {
  std::string why;
  const CollieCudaPlugin* p = plugin(&why);
  if (!p) COLLIE_FAIL(ErrorCode::InvalidUsage, "%s, but %s", what, why.c_str());
  int count = 0;
  int rc = p->deviceCount(&count);
  if (rc != 0) {
    COLLIE_FAIL(ErrorCode::UnhandledCudaError, "%s, but no CUDA device can be used: cudaGetDeviceCount failed: %s",
                what, p->errorString(rc));
  }
  if (count == 0) COLLIE_FAIL(ErrorCode::UnhandledCudaError, "%s, but this machine has no CUDA device", what);
  return *p;
}

void check(int err, const char* what) {
  if (err == 0) return;
  const CollieCudaPlugin* p = loadedPlugin();
  COLLIE_FAIL(ErrorCode::UnhandledCudaError, "%s failed: %s", what, p ? p->errorString(err) : "(CUDA error)");
}

int memoryKind(const void* ptr, int* device) {
  *device = -1;
  if (ptr == nullptr) return kCollieCudaMemoryPageable;
  const CollieCudaPlugin* p = loadedPlugin();
  if (!p) {
    // No device memory can exist before this process loaded the CUDA driver.
    if (!driverLoaded()) return kCollieCudaMemoryPageable;
    p = plugin();
    if (!p) return kCollieCudaMemoryPageable;  // CUDA is in use, but this collie cannot tell (logged at load)
  }
  int kind = kCollieCudaMemoryPageable;
  if (p->pointerKind(ptr, &kind, device) != 0) return kCollieCudaMemoryPageable;
  return kind;
}

std::string memoryKindName(int kind, int device) {
  switch (kind) {
    case kCollieCudaMemoryPinned:
      return "pinned host memory";
    case kCollieCudaMemoryDevice:
      return base::format("device memory of GPU %d", device);
    case kCollieCudaMemoryManaged:
      return base::format("managed memory of GPU %d", device);
    default:
      return "host memory";
  }
}

}  // namespace collie::core::cuda
