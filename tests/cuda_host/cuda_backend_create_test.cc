// Creating the cuda backend where it cannot be used: an index out of range (or, on a machine
// without a driver or GPU, any index) is FAILED_PRECONDITION naming the cause, never a crash; and
// kernels::CreateBackend offers "cuda" in a build with the CUDA target. Needs no device (the
// answers hold with and without one), so it runs wherever the CUDA target is built.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace sift::cuda {
namespace {

using ::testing::HasSubstr;

TEST(CudaBackendCreateTest, IndexOutOfRangeIsFailedPrecondition) {
  for (const int device : {-1, 1000}) {
    CudaBackendOptions options;
    options.device = device;
    const StatusOr<std::unique_ptr<kernels::Backend>> b = CreateCudaBackend(options);
    ASSERT_FALSE(b.ok()) << device;
    EXPECT_TRUE(absl::IsFailedPrecondition(b.status())) << b.status();
    EXPECT_THAT(b.status().message(), HasSubstr("cuda backend: "));
  }
}

TEST(CudaBackendCreateTest, CreateBackendOffersCuda) {
  const std::vector<std::string> names = kernels::AvailableBackendNames();
  EXPECT_EQ(names, (std::vector<std::string>{"reference", "cpu", "cuda"}));
  // Device 0: a backend where there is a GPU, FAILED_PRECONDITION where there is none; never the
  // "unknown backend" INVALID_ARGUMENT of builds without CUDA.
  const StatusOr<std::unique_ptr<kernels::Backend>> b = kernels::CreateBackend("cuda", 1);
  if (b.ok()) {
    EXPECT_EQ((*b)->name(), "cuda");
    EXPECT_EQ((*b)->memory_space(), kernels::MemorySpace::kDevice);
    EXPECT_TRUE((*b)->Synchronize().ok());
  } else {
    EXPECT_TRUE(absl::IsFailedPrecondition(b.status())) << b.status();
  }
}

}  // namespace
}  // namespace sift::cuda
