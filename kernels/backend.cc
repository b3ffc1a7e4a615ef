#include "kernels/backend.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sift::kernels {

std::vector<std::string> AvailableBackendNames() { return {"reference", "cpu"}; }

StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name, int threads) {
  if (name == "reference") return CreateReferenceBackend();
  if (name == "cpu") return CreateCpuBackend(threads);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name,
                   "' (this build has: ", absl::StrJoin(AvailableBackendNames(), ", "), ")"));
}

}  // namespace sift::kernels
