#include "kernels/backend.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#if SIFT_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace sift::kernels {

std::vector<std::string> AvailableBackendNames() {
#if SIFT_HAVE_CUDA
  return {"reference", "cpu", "cuda"};
#else
  return {"reference", "cpu"};
#endif
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name, int threads) {
  if (name == "reference") return CreateReferenceBackend();
  if (name == "cpu") return CreateCpuBackend(threads);
#if SIFT_HAVE_CUDA
  // Device 0 of the visible ones; FAILED_PRECONDITION when there is none.
  if (name == "cuda") return sift::cuda::CreateCudaBackend({});
#endif
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name,
                   "' (this build has: ", absl::StrJoin(AvailableBackendNames(), ", "), ")"));
}

}  // namespace sift::kernels
