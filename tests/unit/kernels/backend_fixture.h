// The fixture of the op tests parameterised over backends (dense_ops_tests.h,
// sequence_ops_tests.h): the parameter is a backend spec of sift::testing::CreateTestBackend
// ("reference", "cpu", "cpu-mirrored", "cpu-avx2", "cuda-mirrored", ...). A cuda spec that cannot
// be created because this machine has no device (FAILED_PRECONDITION) or this build has no CUDA
// backend (INVALID_ARGUMENT) skips the test; any other creation failure fails it. After each test
// the backend's Synchronize() must be OK (a MirroredBackend reports its failed copies there).
// Header-only; one instance per test.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/kernels/onednn_isa_env.h"
#include "tests/util/mirrored_backend.h"

namespace sift::kernels::testing {

// The host backends every build has: the reference, the CPU backend as CreateBackend makes it
// (the widest ISA variant this CPU runs), the same through a MirroredBackend (the proof of the
// mirror's extents and copies that the cuda instantiation relies on), and each of the CPU
// backend's ISA variants by name (skipped, naming the missing features, where the CPU lacks one).
inline std::vector<std::string> HostTestBackends() {
  return {"reference", "cpu", "cpu-mirrored", "cpu-generic", "cpu-avx2", "cpu-avx512"};
}

// gtest parameter names allow only [A-Za-z0-9_]: "cpu-mirrored" -> "cpu_mirrored".
inline std::string BackendParamName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

class BackendOpTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Backend>> b = sift::testing::CreateTestBackend(GetParam(), 2);
    if (!b.ok() && absl::StartsWith(GetParam(), "cuda") &&
        (absl::IsFailedPrecondition(b.status()) || absl::IsInvalidArgument(b.status()))) {
      GTEST_SKIP() << "no cuda backend here: " << b.status();
    }
    if (!b.ok() && absl::StartsWith(GetParam(), "cpu-") && absl::IsFailedPrecondition(b.status())) {
      GTEST_SKIP() << "this CPU cannot run it: " << b.status();
    }
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
  }
  void TearDown() override {
    if (backend_ != nullptr) {
      const Status s = backend_->Synchronize();
      EXPECT_TRUE(s.ok()) << s;
    }
  }

  std::unique_ptr<Backend> backend_;
};

}  // namespace sift::kernels::testing
