#include "common/sysinfo.h"

#include <unistd.h>

#include <fstream>

#include "common/thread_pool.h"

namespace sift {

MachineInfo GetMachineInfo() {
  MachineInfo m;
  m.cpu_model = "unknown";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) m.cpu_model = line.substr(pos + 2);
      break;
    }
  }
  m.cpus = AvailableCpus();
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) m.hostname = host;
  return m;
}

}  // namespace sift
