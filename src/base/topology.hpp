// The machine this rank runs on: NUMA nodes (with their CPUs and memory), cores, and the PCI GPUs and NICs
// with the NUMA node each hangs off. Discovered once per process with hwloc when collie is built with
// COLLIE_WITH_HWLOC, else from sysfs (/sys/devices/system/node, /sys/devices/system/cpu, /sys/bus/pci).
//
// Uses: the shm transport places each ring on the NUMA node of the rank that receives from it
// (placeOnLocalNode), the progress thread can be bound to the CPUs of the rank's node (COLLIE_PIN_THREADS),
// and `collie-info --topo` prints it all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace collie::base {

struct NumaNodeInfo {
  int id = -1;            ///< OS index (node<id> in sysfs)
  uint64_t memBytes = 0;  ///< local memory
  std::vector<int> cpus;  ///< OS indices of the online CPUs of this node
};

struct PciDeviceInfo {
  std::string busId;               ///< domain:bus:device.function, e.g. 0000:3b:00.0
  std::string kind;                ///< "gpu" or "nic"
  std::vector<std::string> names;  ///< OS names: eth0, mlx5_0, card0, cuda0, ...
  uint16_t vendor = 0;
  uint16_t device = 0;
  std::string model;  ///< marketing name when known
  int numaNode = -1;  ///< -1 when the platform does not say
};

struct Topology {
  std::string source;  ///< "hwloc <version>" or "sysfs"
  int packages = 0;
  int cores = 0;  ///< physical cores
  int pus = 0;    ///< hardware threads (online CPUs)
  std::vector<NumaNodeInfo> numaNodes;
  std::vector<PciDeviceInfo> gpus;
  std::vector<PciDeviceInfo> nics;
};

/// The topology of this machine (discovered on first use, then cached; thread-safe).
const Topology& localTopology();
/// Discovery from sysfs only (what localTopology() uses without hwloc); for tests and comparison.
Topology discoverTopologySysfs();
/// Human-readable description, several lines, each starting with `indent`.
std::string describeTopology(const Topology& topo, const std::string& indent = "  ");

/// The NUMA node of a CPU (-1 when unknown).
int numaNodeOfCpu(int cpu);
/// The NUMA node of the CPU the calling thread runs on now (-1 when unknown).
int currentNumaNode();
/// When the machine has several NUMA nodes, asks the kernel to place [addr, addr + bytes) (page aligned) on
/// `node` (mbind MPOL_PREFERRED) before the memory is touched or reserved. Returns true if a policy was set.
bool placeOnNode(void* addr, size_t bytes, int node);
/// Binds the calling thread to the CPUs of `node` that it may run on. Returns true if it was bound.
bool bindThreadToNode(int node);

}  // namespace collie::base
