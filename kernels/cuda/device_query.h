// Device query for the CUDA backend: which GPUs this process can use. Returns an empty list (not
// an error) when the driver reports no device, so CPU-only machines can call it freely.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace sift::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t total_memory_bytes = 0;
  int clock_khz = 0;
};

// Lists visible devices. Errors other than "no device / no driver" become a Status naming the
// CUDA call.
StatusOr<std::vector<DeviceInfo>> QueryDevices();

// The CUDA runtime version this binary was built against, e.g. "13.0".
std::string RuntimeVersion();

}  // namespace sift::cuda
