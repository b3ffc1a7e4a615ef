// Facts about this machine that every benchmark prints beside its numbers.
#pragma once

#include <cstdint>
#include <string>

namespace sift {

struct MachineInfo {
  std::string cpu_model;  // from /proc/cpuinfo, "unknown" if unreadable
  int cpus = 1;           // CPUs this process may run on
  std::string hostname;
};

MachineInfo GetMachineInfo();

// The memory this process may use, in bytes: the cgroup's limit (v2 memory.max, v1
// memory.limit_in_bytes) when there is one below the machine's, else MemTotal; 0 if unreadable.
int64_t AvailableMemoryBytes();

}  // namespace sift
