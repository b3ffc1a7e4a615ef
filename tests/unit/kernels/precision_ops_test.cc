// precision_tests.h on the cpu backend in bf16: the default variant and each ISA variant (skipped
// where the CPU lacks it). Native bf16 (oneDNN on AVX512-BF16 / AMX) where this CPU has it, else
// the emulation (inputs rounded to bf16, products in fp32): the same bound holds for both.
#include "tests/unit/kernels/precision_tests.h"

#include "kernels/cpu/onednn_gemm.h"

namespace sift::kernels {
// precision_tests.h borrows the GRU / AUGRU data helpers of sequence_ops_tests.h, whose suite
// runs in sequence_ops_test.cc.
namespace sequence_op_tests {
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SequenceOpsTest);
}  // namespace sequence_op_tests
namespace precision_op_tests {

INSTANTIATE_TEST_SUITE_P(Cpu, PrecisionOpsTest,
                         ::testing::Combine(::testing::Values("cpu", "cpu-generic", "cpu-avx2",
                                                              "cpu-avx512"),
                                            ::testing::Values(MathMode::kBf16)),
                         PrecisionParamName);

// The cpu backend takes fp32 and bf16 and refuses the cuda-only modes, naming them.
TEST(CpuMathModeTest, AcceptsFp32AndBf16Only) {
  std::unique_ptr<Backend> be = CreateCpuBackend(1);
  for (MathMode mode : {MathMode::kBf16, MathMode::kFp32}) {
    const Status s = be->SetMathMode(mode);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(be->math_mode(), mode);
  }
  for (MathMode mode : {MathMode::kTf32, MathMode::kFp16}) {
    const Status s = be->SetMathMode(mode);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), MathModeName(mode))) << s;
    EXPECT_EQ(be->math_mode(), MathMode::kFp32);
  }
  // auto is bf16 exactly where the CPU has native bf16 dot products; emulated bf16 says so.
  EXPECT_EQ(be->AutoMathMode(), OneDnnGemm::Bf16Native() ? MathMode::kBf16 : MathMode::kFp32);
  ASSERT_TRUE(be->SetMathMode(MathMode::kBf16).ok());
  bool warned = false;
  for (const std::string& w : be->Warnings()) warned |= absl::StrContains(w, "emulated");
  EXPECT_EQ(warned, !OneDnnGemm::Bf16Native());
  EXPECT_TRUE(
      absl::StrContains(be->Describe(), OneDnnGemm::Bf16Native() ? "bf16 native" : "bf16 emulated"))
      << be->Describe();
}

}  // namespace precision_op_tests
}  // namespace sift::kernels
