// The vector ISAs the CPU backend's own kernels are compiled for (everything but the GEMMs, which
// oneDNN dispatches itself), the CPU's support for them — read from CPUID feature bits and the
// OS's saved vector state (GCC's __builtin_cpu_supports), never from a table of CPU models — and
// the words the benchmarks print about them. One binary holds every variant (cpu_backend.cc picks
// one at run time), so it runs at full vector width on AVX2 and AVX-512 machines and never
// executes an instruction the CPU lacks.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace sift::kernels {

// In increasing order of capability; each level includes the ones below it.
enum class CpuIsa {
  kGeneric = 0,  // x86-64 baseline (SSE2), or any other architecture: the portable fallback
  kAvx2 = 1,     // x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE
  kAvx512 = 2,   // x86-64-v4: x86-64-v3 + AVX-512 F, BW, CD, DQ, VL (512-bit vectors)
};

// "generic", "avx2", "avx512".
const char* CpuIsaName(CpuIsa isa);
// The inverse of CpuIsaName, plus "auto" -> nullopt-like BestCpuIsa(); INVALID_ARGUMENT naming
// the choices otherwise.
StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name);
// Whether this CPU (and OS) can run code of `isa`.
bool CpuSupports(CpuIsa isa);
// The widest ISA this CPU supports.
CpuIsa BestCpuIsa();
// Every ISA this CPU supports, lowest first.
std::vector<CpuIsa> SupportedCpuIsas();
// What `isa` lacks on this CPU, e.g. "avx512f avx512bw" ("" when supported): for skip messages.
std::string MissingCpuFeatures(CpuIsa isa);
// The CPU's model name (/proc/cpuinfo "model name", or "unknown CPU") and the vector / matrix
// features that matter here, e.g. "avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16".
std::string CpuModelName();
std::string CpuVectorFeatures();

}  // namespace sift::kernels
