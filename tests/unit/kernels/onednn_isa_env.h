// A gtest environment for the op-test binaries that tests/CMakeLists.txt also runs with
// ONEDNN_MAX_CPU_ISA set (the `*_onednn_<ISA>` ctest entries): when the cap names an ISA this CPU
// does not have, oneDNN silently runs a lower one, so every test of the binary is skipped with a
// message naming the ISA actually in effect, instead of passing on the wrong path. Without the
// variable nothing happens. Header-only; the registration is one inline variable per binary.
#pragma once

#include <cctype>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/onednn_gemm.h"

namespace sift::kernels::testing {

class OneDnnIsaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (cap == nullptr || *cap == '\0') return;
    std::string want = cap;
    for (char& c : want) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string got = OneDnnGemm::EffectiveIsa();
    if (got != want) {
      GTEST_SKIP() << "ONEDNN_MAX_CPU_ISA=" << cap << " is not in effect on this CPU: it lacks "
                   << want << ", so oneDNN runs " << got;
    }
    std::printf("oneDNN ISA in effect: %s (ONEDNN_MAX_CPU_ISA=%s)\n", got.c_str(), cap);
  }
};

inline ::testing::Environment* const kOneDnnIsaEnvironment =
    ::testing::AddGlobalTestEnvironment(new OneDnnIsaEnvironment);

}  // namespace sift::kernels::testing
