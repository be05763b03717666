// Shared segments of the shm transport (see shm_segment.hpp).
#include "transport/shm/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/topology.hpp"

namespace collie::transport::shm {
namespace {

size_t pageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

std::string mib(size_t bytes) { return base::format("%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

const char* kShrinkHint =
    "make the rings smaller (COLLIE_SHM_SLOTS, COLLIE_SHM_SLOT_BYTES) or set COLLIE_SHM_DISABLE=1 to use tcp "
    "between ranks of this host";

[[noreturn]] void failDevShm(const SegmentPurpose& p, size_t bytes, int err) {
  struct statvfs vfs {};
  std::string room = "unknown";
  if (statvfs("/dev/shm", &vfs) == 0) {
    room = base::format("%zu bytes (%s) free of %zu (%s)", static_cast<size_t>(vfs.f_bavail) * vfs.f_frsize,
                        mib(static_cast<size_t>(vfs.f_bavail) * vfs.f_frsize).c_str(),
                        static_cast<size_t>(vfs.f_blocks) * vfs.f_frsize,
                        mib(static_cast<size_t>(vfs.f_blocks) * vfs.f_frsize).c_str());
  }
  std::string failed = p.what.empty() ? std::string()
                                      : base::format("; reserving %zu bytes for %s failed (%s)", bytes, p.what.c_str(),
                                                     base::errnoString(err).c_str());
  COLLIE_FAIL(ErrorCode::SystemError,
              "shm transport: /dev/shm is too small: rank %d needs %zu bytes (%s) of shared memory for its rings "
              "(%d same-host peer(s)) and /dev/shm has %s%s. Make /dev/shm larger (docker run --shm-size=1g, or in "
              "Kubernetes an emptyDir with medium: Memory mounted at /dev/shm), use COLLIE_SHM_BACKING=memfd (not "
              "limited by /dev/shm), or %s",
              p.rank, p.totalBytes, mib(p.totalBytes).c_str(), p.peers, room.c_str(), failed.c_str(), kShrinkHint);
}

[[noreturn]] void failMemfd(const SegmentPurpose& p, size_t bytes, int err) {
  COLLIE_FAIL(ErrorCode::SystemError,
              "shm transport: rank %d could not reserve %zu bytes of shared memory (memfd) for %s: %s. It needs %zu "
              "bytes (%s) in all for %d same-host peer(s); the memory limit of this process (its cgroup or "
              "container) may be reached: raise it, or %s",
              p.rank, bytes, p.what.c_str(), base::errnoString(err).c_str(), p.totalBytes, mib(p.totalBytes).c_str(),
              p.peers, kShrinkHint);
}

/// A new, nameless shared-memory file.
UniqueFd openAnonymous(Backing backing) {
  if (backing == Backing::Memfd) {
    int fd = memfd_create("collie-shm", MFD_CLOEXEC);
    COLLIE_SYSCHECK(fd, "memfd_create (set COLLIE_SHM_BACKING=devshm or COLLIE_SHM_DISABLE=1 if it is not allowed)");
    return UniqueFd(fd);
  }
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd ^= static_cast<uint64_t>(getpid()) << 20 ^ attempt;
    std::string name = base::format("/collie-%d-%016llx", getpid(), static_cast<unsigned long long>(rnd));
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    COLLIE_SYSCHECK(fd, "shm_open in /dev/shm (set COLLIE_SHM_BACKING=memfd)");
    shm_unlink(name.c_str());  // at once: the name is gone before anything can crash; the fd keeps the file
    return UniqueFd(fd);
  }
  COLLIE_FAIL(ErrorCode::SystemError, "shm_open: no free name in /dev/shm after 16 attempts");
}

// One mapping per segment per process, shared (and counted) by the Segments of ranks that are threads of this
// process. Besides saving address space, this keeps every shared word at one address in the process, which is
// how ThreadSanitizer tracks synchronisation: two mappings of one page would look unsynchronised to it.
struct FileKey {
  dev_t dev;
  ino_t ino;
  bool operator<(const FileKey& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
};
struct Mapping {
  FileKey key;
  size_t bytes;
  int refs;
};
struct Registry {
  std::mutex mu;
  std::map<void*, Mapping> byAddr;
  std::map<FileKey, void*> byFile;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: Segments may outlive static destruction order
  return *r;
}

FileKey keyOf(int fd) {
  struct stat st {};
  COLLIE_SYSCHECK(fstat(fd, &st), "fstat of a shm segment");
  return FileKey{st.st_dev, st.st_ino};
}

/// Maps fd (or shares this process's mapping of it, when large enough) and counts the reference.
void* mapShared(int fd, size_t bytes, const FileKey& key) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto found = r.byFile.find(key);
  if (found != r.byFile.end()) {
    Mapping& m = r.byAddr.at(found->second);
    if (m.bytes >= bytes) {
      ++m.refs;
      return found->second;
    }
  }
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) COLLIE_SYSCHECK(-1, "mmap of a shm segment");
  if (found == r.byFile.end()) {  // else the smaller mapping stays where it is and this one is private to us
    r.byFile[key] = addr;
  }
  r.byAddr[addr] = Mapping{key, bytes, 1};
  return addr;
}

}  // namespace

size_t ringBytes(uint32_t slots, uint32_t slotBytes) {
  size_t bytes = kSlotsOffset + static_cast<size_t>(slots) * (sizeof(SlotHeader) + slotBytes);
  return (bytes + pageSize() - 1) / pageSize() * pageSize();
}

RingView RingView::of(void* base) {
  RingView v;
  char* b = static_cast<char*>(base);
  v.header = reinterpret_cast<RingHeader*>(b);
  v.consumer = reinterpret_cast<ConsumerLine*>(b + kConsumerOffset);
  v.producer = reinterpret_cast<ProducerLine*>(b + kProducerOffset);
  v.flags = reinterpret_cast<ConsumerFlags*>(b + kConsumerFlagsOffset);
  v.slots = b + kSlotsOffset;
  v.mask = v.header->slots - 1;
  v.slotBytes = v.header->slotBytes;
  v.stride = sizeof(SlotHeader) + v.header->slotBytes;
  return v;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    addr_ = o.addr_;
    bytes_ = o.bytes_;
    o.addr_ = nullptr;
  }
  return *this;
}

void Segment::reset() {
  if (!addr_) return;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.byAddr.find(addr_);
    if (it != r.byAddr.end()) {
      if (--it->second.refs == 0) {
        munmap(addr_, it->second.bytes);
        auto f = r.byFile.find(it->second.key);
        if (f != r.byFile.end() && f->second == addr_) r.byFile.erase(f);
        r.byAddr.erase(it);
      }
    } else {
      munmap(addr_, bytes_);
    }
  }
  addr_ = nullptr;
  bytes_ = 0;
}

Backing parseBacking(const std::string& text) {
  if (text.empty() || text == "memfd") return Backing::Memfd;
  if (text == "devshm") return Backing::DevShm;
  COLLIE_FAIL(ErrorCode::InvalidArgument, "COLLIE_SHM_BACKING='%s': expected memfd or devshm", text.c_str());
}

void checkDevShmRoom(const SegmentPurpose& purpose) {
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) return;  // createSegment will say what is wrong
  if (static_cast<size_t>(vfs.f_bavail) * vfs.f_frsize < purpose.totalBytes)
    failDevShm(purpose, purpose.totalBytes, ENOSPC);
}

UniqueFd createSegment(Backing backing, size_t bytes, int numaNode, const SegmentPurpose& purpose, Segment* out) {
  UniqueFd fd = openAnonymous(backing);
  COLLIE_SYSCHECK(ftruncate(fd.get(), static_cast<off_t>(bytes)), "ftruncate of a shm segment");
  void* addr = mapShared(fd.get(), bytes, keyOf(fd.get()));
  Segment seg(addr, bytes);
  // The policy goes on the file's pages before any is allocated, so the reservation below already lands on
  // the receiver's node.
  if (numaNode >= 0) base::placeOnNode(addr, bytes, numaNode);
  int err = posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  if (err == EOPNOTSUPP || err == EINVAL) {
    // No fallocate on this filesystem: touch every page instead, which fails the same way but as a SIGBUS,
    // so check the room first where we can.
    if (backing == Backing::DevShm) checkDevShmRoom(purpose);
    for (size_t off = 0; off < bytes; off += pageSize()) static_cast<volatile char*>(addr)[off] = 0;
    err = 0;
  }
  if (err != 0) {
    if (backing == Backing::DevShm) failDevShm(purpose, bytes, err);
    failMemfd(purpose, bytes, err);
  }
  *out = std::move(seg);
  return fd;
}

Segment mapSegment(int fd, size_t bytes, const std::string& what) {
  struct stat st {};
  COLLIE_SYSCHECK(fstat(fd, &st), "fstat of a peer's shm segment");
  COLLIE_ENFORCE(static_cast<size_t>(st.st_size) >= bytes, ErrorCode::InternalError,
                 "shm transport: %s is %lld bytes, expected at least %zu", what.c_str(),
                 static_cast<long long>(st.st_size), bytes);
  return Segment(mapShared(fd, bytes, FileKey{st.st_dev, st.st_ino}), bytes);
}

}  // namespace collie::transport::shm
