#include "gpu/gpu_test_util.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace collie::test::gpu {
namespace {

// The tests link libcollie statically, so the plugin is not next to "libcollie" (the test binary): point the
// loader at the one this build made, unless the environment chose one. Children inherit it.
const bool kPluginPathSet = [] {
#ifdef COLLIE_CUDA_PLUGIN_PATH
  setenv("COLLIE_CUDA_PLUGIN", COLLIE_CUDA_PLUGIN_PATH, 0);
#endif
  return true;
}();

struct Probe {
  std::string reason;
  int count = 0;
};

// cudaGetDeviceCount in a forked child, which reports over a pipe.
Probe probe() {
  Probe p;
  int fds[2];
  if (pipe(fds) != 0) {
    p.reason = "no CUDA device check: pipe failed";
    return p;
  }
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    p.reason = "no CUDA device check: fork failed";
    return p;
  }
  if (pid == 0) {
    close(fds[0]);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    char msg[512];
    if (e != cudaSuccess) {
      snprintf(msg, sizeof(msg), "E no CUDA device: cudaGetDeviceCount returned %s (%s)", cudaGetErrorName(e),
               cudaGetErrorString(e));
    } else if (n == 0) {
      snprintf(msg, sizeof(msg), "E no CUDA device: cudaGetDeviceCount returned 0 devices");
    } else {
      snprintf(msg, sizeof(msg), "%d", n);
    }
    ssize_t w = write(fds[1], msg, strlen(msg));
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t r;
  while ((r = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (out.empty()) {
    p.reason = "no CUDA device: the cudaGetDeviceCount probe process died";
  } else if (out[0] == 'E') {
    p.reason = out.substr(2);
  } else {
    p.count = std::atoi(out.c_str());
  }
  return p;
}

const Probe& cached() {
  static const Probe p = probe();
  return p;
}

}  // namespace

const std::string& skipReason() { return cached().reason; }
int deviceCount() { return cached().count; }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

DeviceMem::DeviceMem(size_t bytes) : bytes_(bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  ptr_ = static_cast<char*>(p);
}

DeviceMem::~DeviceMem() {
  if (ptr_) cudaFree(ptr_);
}

PinnedMem::PinnedMem(size_t bytes) : bytes_(bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes), "cudaMallocHost");
  ptr_ = static_cast<uint8_t*>(p);
}

PinnedMem::~PinnedMem() {
  if (ptr_) cudaFreeHost(ptr_);
}

Stream::Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}

}  // namespace collie::test::gpu
