// Facts about this machine that every benchmark prints beside its numbers.
#pragma once

#include <string>

namespace sift {

struct MachineInfo {
  std::string cpu_model;  // from /proc/cpuinfo, "unknown" if unreadable
  int cpus = 1;           // CPUs this process may run on
  std::string hostname;
};

MachineInfo GetMachineInfo();

}  // namespace sift
