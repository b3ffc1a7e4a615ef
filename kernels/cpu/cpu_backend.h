// The CPU backend (kernels/backend.h on the host): every GEMM on oneDNN, everything else in sift's
// own kernels, compiled once per vector ISA into the one binary (cpu_isa.h) and picked at run time
// for the CPU at hand. The ops, their parallelisation and their determinism are described in
// cpu_backend_class.inc; the variants are cpu_backend_{generic,avx2,avx512}.cc.
#pragma once

#include <memory>
#include <optional>

#include "common/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"

namespace sift::kernels {

struct CpuBackendOptions {
  // Threads of the backend's pool, which also runs every GEMM (<= 0: every available CPU).
  int threads = 0;
  // The kernels' ISA variant; nullopt = the widest this CPU supports (BestCpuIsa()).
  std::optional<CpuIsa> isa;
};

// FAILED_PRECONDITION naming the missing CPU features when `options.isa` is one this CPU cannot
// run.
StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options);

// What one variant's factory receives (internal to kernels/cpu).
struct CpuBackendConfig {
  int threads = 0;
  CpuIsa isa = CpuIsa::kGeneric;
};
namespace generic {
std::unique_ptr<Backend> CreateCpuBackendVariant(const CpuBackendConfig& config);
}
namespace avx2 {
std::unique_ptr<Backend> CreateCpuBackendVariant(const CpuBackendConfig& config);
}
namespace avx512 {
std::unique_ptr<Backend> CreateCpuBackendVariant(const CpuBackendConfig& config);
}

}  // namespace sift::kernels
