// Topology discovery: hwloc when built with it (COLLIE_WITH_HWLOC), else sysfs. Both fill the same Topology;
// placement and binding use plain syscalls (mbind, sched_setaffinity) either way, so that no NUMA library is
// needed at run time.
#include "base/topology.hpp"

#include <collie/config.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "base/errors.hpp"
#include "base/log.hpp"

#if COLLIE_WITH_HWLOC
#include <hwloc.h>
#endif

namespace collie::base {
namespace {

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

long readNumber(const std::string& path, int base = 10, long fallback = -1) {
  std::string s = readLine(path);
  if (s.empty()) return fallback;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, base);
  return end == s.c_str() ? fallback : v;
}

/// Parses a kernel CPU list ("0-3,8,10-11").
std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    int a = -1, b = -1;
    if (std::sscanf(part.c_str(), "%d-%d", &a, &b) == 2) {
      for (int c = a; c <= b; ++c) out.push_back(c);
    } else if (std::sscanf(part.c_str(), "%d", &a) == 1) {
      out.push_back(a);
    }
  }
  return out;
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// "gpu", "nic" or "" from a PCI class code (base class << 16 | subclass << 8 | interface).
std::string pciKind(unsigned classCode) {
  unsigned base = classCode >> 16;
  if (base == 0x03) return "gpu";  // display controllers: VGA, 3D (every NVIDIA/AMD compute GPU)
  if (base == 0x02) return "nic";  // network controllers: Ethernet, InfiniBand, ...
  return "";
}

/// OS names of a PCI device from sysfs: net/<if>, infiniband/<dev>, drm/card<N>.
std::vector<std::string> sysfsDeviceNames(const std::string& dev) {
  std::vector<std::string> names;
  for (const char* sub : {"net", "infiniband"})
    for (const std::string& n : listDir(dev + "/" + sub)) names.push_back(n);
  for (const std::string& n : listDir(dev + "/drm"))
    if (n.rfind("card", 0) == 0) names.push_back(n);
  return names;
}

}  // namespace

Topology discoverTopologySysfs() {
  Topology topo;
  topo.source = "sysfs";
  std::vector<int> online = parseCpuList(readLine("/sys/devices/system/cpu/online"));
  if (online.empty()) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (int c = 0; c < n; ++c) online.push_back(c);
  }
  topo.pus = static_cast<int>(online.size());
  std::set<std::pair<long, long>> cores;
  std::set<long> packages;
  for (int c : online) {
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    long pkg = readNumber(base + "physical_package_id", 10, 0);
    long core = readNumber(base + "core_id", 10, c);
    cores.insert({pkg, core});
    packages.insert(pkg);
  }
  topo.cores = static_cast<int>(cores.size());
  topo.packages = static_cast<int>(packages.size());

  std::set<int> onlineSet(online.begin(), online.end());
  for (const std::string& name : listDir("/sys/devices/system/node")) {
    int id = -1;
    if (std::sscanf(name.c_str(), "node%d", &id) != 1) continue;
    NumaNodeInfo node;
    node.id = id;
    std::string dir = "/sys/devices/system/node/" + name;
    for (int c : parseCpuList(readLine(dir + "/cpulist")))
      if (onlineSet.count(c)) node.cpus.push_back(c);
    std::ifstream meminfo(dir + "/meminfo");
    std::string line;
    while (std::getline(meminfo, line)) {
      unsigned long long kb = 0;
      int n = 0;
      if (std::sscanf(line.c_str(), "Node %d MemTotal: %llu kB", &n, &kb) == 2) node.memBytes = kb * 1024;
    }
    topo.numaNodes.push_back(node);
  }
  if (topo.numaNodes.empty()) {  // a kernel without NUMA support: one node holding everything
    NumaNodeInfo node;
    node.id = 0;
    node.cpus = online;
    node.memBytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    topo.numaNodes.push_back(node);
  }
  std::sort(topo.numaNodes.begin(), topo.numaNodes.end(),
            [](const NumaNodeInfo& a, const NumaNodeInfo& b) { return a.id < b.id; });

  for (const std::string& bdf : listDir("/sys/bus/pci/devices")) {
    std::string dev = "/sys/bus/pci/devices/" + bdf;
    long cls = readNumber(dev + "/class", 16);
    if (cls < 0) continue;
    std::string kind = pciKind(static_cast<unsigned>(cls));
    if (kind.empty()) continue;
    PciDeviceInfo info;
    info.busId = bdf;
    info.kind = kind;
    info.vendor = static_cast<uint16_t>(readNumber(dev + "/vendor", 16, 0));
    info.device = static_cast<uint16_t>(readNumber(dev + "/device", 16, 0));
    info.numaNode = static_cast<int>(readNumber(dev + "/numa_node", 10, -1));
    info.names = sysfsDeviceNames(dev);
    (kind == "gpu" ? topo.gpus : topo.nics).push_back(info);
  }
  return topo;
}

#if COLLIE_WITH_HWLOC
namespace {

std::vector<int> bitmapToList(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (!set) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

Topology discoverTopologyHwloc() {
  hwloc_topology_t h = nullptr;
  if (hwloc_topology_init(&h) != 0) COLLIE_FAIL(ErrorCode::SystemError, "hwloc_topology_init failed");
  struct Guard {
    hwloc_topology_t h;
    ~Guard() { hwloc_topology_destroy(h); }
  } guard{h};
  hwloc_topology_set_io_types_filter(h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // PCI devices from sysfs (hwloc's linuxio component) rather than libpciaccess (the pci component, whose
  // allocations outlive the topology: LeakSanitizer reports them in every test that makes a shm connection);
  // OpenCL and OpenGL add nothing collie uses.
  for (const char* name : {"pci", "opencl", "gl"})
    hwloc_topology_set_components(h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
  if (hwloc_topology_load(h) != 0) COLLIE_FAIL(ErrorCode::SystemError, "hwloc_topology_load failed");

  Topology topo;
#ifdef HWLOC_VERSION
  topo.source = "hwloc " HWLOC_VERSION;
#else
  unsigned v = hwloc_get_api_version();
  topo.source = format("hwloc (API %u.%u)", v >> 16, (v >> 8) & 0xff);
#endif
  topo.packages = std::max(1, hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE));
  topo.cores = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE);
  topo.pus = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU);
  int nodes = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    NumaNodeInfo node;
    node.id = static_cast<int>(o->os_index);
    node.memBytes = o->attr ? o->attr->numanode.local_memory : 0;
    // PU objects' os_index are the OS CPU numbers; the node's cpuset is indexed by them.
    node.cpus = bitmapToList(o->cpuset);
    topo.numaNodes.push_back(node);
  }
  std::sort(topo.numaNodes.begin(), topo.numaNodes.end(),
            [](const NumaNodeInfo& a, const NumaNodeInfo& b) { return a.id < b.id; });

  for (hwloc_obj_t o = hwloc_get_next_pcidev(h, nullptr); o; o = hwloc_get_next_pcidev(h, o)) {
    const auto& pci = o->attr->pcidev;
    std::string kind = pciKind(static_cast<unsigned>(pci.class_id) << 8);
    if (kind.empty()) continue;
    PciDeviceInfo info;
    info.busId = format("%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.dev, pci.func);
    info.kind = kind;
    info.vendor = pci.vendor_id;
    info.device = pci.device_id;
    if (const char* model = hwloc_obj_get_info_by_name(o, "PCIDevice")) info.model = model;
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE && c->name) info.names.emplace_back(c->name);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h, o);
    // Only a device below exactly one NUMA node is local to it; below the machine it is "any".
    if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1 && nodes > 1)
      info.numaNode = hwloc_bitmap_first(anc->nodeset);
    (kind == "gpu" ? topo.gpus : topo.nics).push_back(info);
  }
  return topo;
}

}  // namespace
#endif

const Topology& localTopology() {
  static const Topology topo = [] {
#if COLLIE_WITH_HWLOC
    try {
      return discoverTopologyHwloc();
    } catch (const Error& e) {
      COLLIE_WARN(kLogInit, "topology: hwloc failed (%s); using sysfs", e.what());
    }
#endif
    return discoverTopologySysfs();
  }();
  return topo;
}

std::string describeTopology(const Topology& topo, const std::string& indent) {
  auto cpuRanges = [](const std::vector<int>& cpus) {
    std::string out;
    for (size_t i = 0; i < cpus.size();) {
      size_t j = i;
      while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
      out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
      if (j > i) out += "-" + std::to_string(cpus[j]);
      i = j + 1;
    }
    return out.empty() ? std::string("none") : out;
  };
  std::string out;
  out += format("%ssource: %s\n", indent.c_str(), topo.source.c_str());
  out += format("%s%d package(s), %d core(s), %d hardware thread(s), %zu NUMA node(s)\n", indent.c_str(), topo.packages,
                topo.cores, topo.pus, topo.numaNodes.size());
  for (const NumaNodeInfo& n : topo.numaNodes)
    out += format("%s  NUMA node %d: %.1f GiB, CPUs %s\n", indent.c_str(), n.id,
                  static_cast<double>(n.memBytes) / (1024.0 * 1024 * 1024), cpuRanges(n.cpus).c_str());
  for (const auto* list : {&topo.gpus, &topo.nics}) {
    const char* title = list == &topo.gpus ? "GPUs" : "NICs";
    out += format("%s%s: %zu\n", indent.c_str(), title, list->size());
    for (const PciDeviceInfo& d : *list) {
      std::string names;
      for (const std::string& n : d.names) names += (names.empty() ? "" : ",") + n;
      std::string node = d.numaNode >= 0 ? std::to_string(d.numaNode) : std::string("any");
      out += format("%s  %s [%04x:%04x] %s  NUMA node %s%s%s\n", indent.c_str(), d.busId.c_str(), d.vendor, d.device,
                    names.empty() ? "-" : names.c_str(), node.c_str(), d.model.empty() ? "" : "  ", d.model.c_str());
    }
  }
  return out;
}

int numaNodeOfCpu(int cpu) {
  for (const NumaNodeInfo& n : localTopology().numaNodes)
    if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) return n.id;
  return -1;
}

int currentNumaNode() {
  unsigned cpu = 0, node = 0;
  if (syscall(SYS_getcpu, &cpu, &node, nullptr) == 0) return static_cast<int>(node);
  return numaNodeOfCpu(sched_getcpu());
}

bool placeOnNode(void* addr, size_t bytes, int node) {
  // The node count from sysfs, not localTopology(): this runs at every shm connect, and a full discovery
  // would only be needed to answer "more than one node?".
  static const size_t nodes = [] {
    size_t n = parseCpuList(readLine("/sys/devices/system/node/online")).size();
    return n > 0 ? n : size_t{1};
  }();
  if (nodes <= 1 || node < 0 || node >= 1024) return false;
  constexpr int kMpolPreferred = 1;  // <numaif.h> MPOL_PREFERRED, without needing libnuma's headers
  unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
  mask[static_cast<size_t>(node) / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
  long rc = syscall(SYS_mbind, addr, bytes, kMpolPreferred, mask, sizeof(mask) * 8, 0u);
  if (rc != 0) {
    COLLIE_INFO(kLogInit, "topology: mbind of %zu bytes to NUMA node %d failed: %s", bytes, node,
                errnoString(errno).c_str());
    return false;
  }
  return true;
}

bool bindThreadToNode(int node) {
  const Topology& topo = localTopology();
  auto it =
      std::find_if(topo.numaNodes.begin(), topo.numaNodes.end(), [&](const NumaNodeInfo& n) { return n.id == node; });
  if (it == topo.numaNodes.end()) return false;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return false;
  cpu_set_t want;
  CPU_ZERO(&want);
  int count = 0;
  for (int c : it->cpus) {
    if (c >= 0 && c < CPU_SETSIZE && CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &want);
      ++count;
    }
  }
  if (count == 0) return false;  // none of the node's CPUs is ours to use: leave the thread where it is
  if (pthread_setaffinity_np(pthread_self(), sizeof(want), &want) != 0) return false;
  COLLIE_INFO(kLogInit, "topology: thread bound to the %d CPU(s) of NUMA node %d", count, node);
  return true;
}

}  // namespace collie::base
