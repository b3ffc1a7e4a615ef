#include "kernels/cpu/cpu_backend.h"

#include "absl/strings/str_cat.h"

namespace sift::kernels {

StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options) {
  const CpuIsa isa = options.isa.value_or(BestCpuIsa());
  if (!CpuSupports(isa)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cpu backend: this CPU (", CpuModelName(), ") cannot run the ",
                     CpuIsaName(isa), " kernels: it lacks ", MissingCpuFeatures(isa)));
  }
  const CpuBackendConfig config{options.threads, isa};
  switch (isa) {
    case CpuIsa::kGeneric:
      return generic::CreateCpuBackendVariant(config);
    case CpuIsa::kAvx2:
      return avx2::CreateCpuBackendVariant(config);
    case CpuIsa::kAvx512:
      return avx512::CreateCpuBackendVariant(config);
  }
  return absl::InternalError("cpu backend: unknown ISA");
}

std::unique_ptr<Backend> CreateCpuBackend(int threads) {
  CpuBackendOptions options;
  options.threads = threads;
  StatusOr<std::unique_ptr<Backend>> be = CreateCpuBackend(options);
  // BestCpuIsa() is supported by definition.
  return be.ok() ? std::move(*be) : nullptr;
}

}  // namespace sift::kernels
