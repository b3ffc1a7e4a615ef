// sift device: lists the CUDA devices this binary can use (or says why there are none).
#include <cstdio>

#include "cli/commands.h"
#ifdef SIFT_HAVE_CUDA
#include "kernels/cuda/device_query.h"
#endif

namespace sift::cli {

void AddDevice(CLI::App* app, Action* action) {
  CLI::App* cmd = app->add_subcommand("device", "List the GPUs this sift build can use");
  cmd->callback([action] {
    *action = []() -> Status {
#ifdef SIFT_HAVE_CUDA
      SIFT_ASSIGN_OR_RETURN(auto devices, sift::cuda::QueryDevices());
      std::printf("CUDA runtime %s, built for sm_80 and sm_90\n",
                  sift::cuda::RuntimeVersion().c_str());
      if (devices.empty()) std::printf("no CUDA device visible (CPU backend only)\n");
      for (const auto& d : devices) {
        std::printf("gpu %d: %s, sm_%d%d, %d SMs, %.1f GiB, %.2f GHz\n", d.index, d.name.c_str(),
                    d.sm_major, d.sm_minor, d.multiprocessors,
                    static_cast<double>(d.total_memory_bytes) / (1u << 30), d.clock_khz / 1e6);
      }
#else
      std::printf(
          "this sift was built without CUDA (SIFT_CUDA=off or no nvcc): CPU backend only\n");
#endif
      return absl::OkStatus();
    };
  });
}

}  // namespace sift::cli
