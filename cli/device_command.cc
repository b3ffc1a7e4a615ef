// sift device: what this binary computes on here — the CPU (its vector features, the kernel
// variant the cpu backend runs, oneDNN's ISA, whether bf16 is native) and the CUDA devices it can
// use (or why there are none).
#include <cstdio>

#include "cli/commands.h"
#include "common/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/onednn_gemm.h"
#ifdef SIFT_HAVE_CUDA
#include "kernels/cuda/device_query.h"
#endif

namespace sift::cli {

void AddDevice(CLI::App* app, Action* action) {
  CLI::App* cmd = app->add_subcommand(
      "device", "The CPU ISA the cpu backend uses here, and the GPUs this sift build can use");
  cmd->callback([action] {
    *action = []() -> Status {
      const kernels::CpuIsa isa = kernels::BestCpuIsa();
      std::printf("cpu: %s, %d CPUs, features: %s\n", kernels::CpuModelName().c_str(),
                  AvailableCpus(), kernels::CpuVectorFeatures().c_str());
      std::printf("cpu backend: kernels %s, GEMMs oneDNN %s %s, bf16 %s\n",
                  kernels::CpuIsaName(isa), kernels::OneDnnGemm::Version().c_str(),
                  kernels::OneDnnGemm::EffectiveIsa().c_str(),
                  kernels::OneDnnGemm::Bf16Native()
                      ? "native (precision auto = bf16)"
                      : "emulated (no AVX512-BF16 / AMX; precision auto = fp32)");
      if (isa == kernels::CpuIsa::kGeneric) {
        std::printf(
            "warning: the cpu kernels fall back to generic x86-64 code: this CPU lacks %s\n",
            kernels::MissingCpuFeatures(kernels::CpuIsa::kAvx2).c_str());
      }
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
