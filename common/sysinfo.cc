#include "common/sysinfo.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

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

namespace {

// The first number in `path`, or -1 (absent, unreadable, or "max").
int64_t ReadNumber(const char* path) {
  std::ifstream in(path);
  long long v = -1;
  if (!(in >> v)) return -1;
  return static_cast<int64_t>(v);
}

}  // namespace

int64_t AvailableMemoryBytes() {
  int64_t total = 0;
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemTotal:", 0) == 0) {
      total = std::strtoll(line.c_str() + 9, nullptr, 10) * 1024;  // in kB
      break;
    }
  }
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const int64_t limit = ReadNumber(path);
    if (limit > 0 && (total == 0 || limit < total)) total = limit;
  }
  return total;
}

}  // namespace sift
