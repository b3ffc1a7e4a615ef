// TinyDatasetSuite<kSeed>: a test fixture whose tests share one generated `tiny` dataset
// (`sift data gen --preset tiny --seed kSeed`), made once per suite in a temp dir (dir_, which the
// suite may use for its other files) and removed after the suite. Each test file is its own
// executable, so the static members are one suite's.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::testing {

template <int kSeed>
class TinyDatasetSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunSift(
        {"data", "gen", "--preset", "tiny", "--seed", std::to_string(kSeed), "--out", Tiny()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Tiny() { return dir_->Sub("tiny"); }

  static inline TempDir* dir_ = nullptr;
};

}  // namespace sift::testing
