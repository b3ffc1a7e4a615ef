#include "kernels/cpu/cpu_isa.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace sift::kernels {
namespace {

struct Feature {
  const char* builtin;  // the name __builtin_cpu_supports takes
  const char* shown;    // the name printed (Linux's /proc/cpuinfo spelling)
};

// The features each level needs beyond the one below it (what MissingCpuFeatures reports).
std::vector<const char*> LevelFeatures(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric:
      return {};
    case CpuIsa::kAvx2:
      return {"avx2", "fma", "f16c", "bmi", "bmi2", "movbe"};
    case CpuIsa::kAvx512:
      return {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"};
  }
  return {};
}

bool Supports(const char* feature) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // __builtin_cpu_supports needs literal names: map the few we ask about.
  const absl::string_view f = feature;
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  if (f == "f16c") return __builtin_cpu_supports("f16c");
  if (f == "bmi") return __builtin_cpu_supports("bmi");
  if (f == "bmi2") return __builtin_cpu_supports("bmi2");
  if (f == "movbe") return __builtin_cpu_supports("movbe");
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "avx512cd") return __builtin_cpu_supports("avx512cd");
  if (f == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
  if (f == "amx-bf16") return __builtin_cpu_supports("amx-bf16");
  if (f == "avx512fp16") return __builtin_cpu_supports("avx512fp16");
#else
  (void)feature;
#endif
  return false;
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric:
      return "generic";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name) {
  if (name == "auto") return BestCpuIsa();
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU ISA '", name, "' (expected auto, generic, avx2 or avx512)"));
}

bool CpuSupports(CpuIsa isa) { return MissingCpuFeatures(isa).empty(); }

std::string MissingCpuFeatures(CpuIsa isa) {
  std::vector<std::string> missing;
  for (int level = 1; level <= static_cast<int>(isa); ++level) {
    for (const char* f : LevelFeatures(static_cast<CpuIsa>(level))) {
      if (!Supports(f)) missing.push_back(f);
    }
  }
#if !defined(__x86_64__)
  if (isa != CpuIsa::kGeneric) missing.push_back("x86-64");
#endif
  return absl::StrJoin(missing, " ");
}

CpuIsa BestCpuIsa() {
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2}) {
    if (CpuSupports(isa)) return isa;
  }
  return CpuIsa::kGeneric;
}

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuSupports(isa)) out.push_back(isa);
  }
  return out;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l = line;
    if (!absl::ConsumePrefix(&l, "model name")) continue;
    const size_t colon = l.find(':');
    if (colon == absl::string_view::npos) continue;
    return std::string(absl::StripAsciiWhitespace(l.substr(colon + 1)));
  }
  return "unknown CPU";
}

std::string CpuVectorFeatures() {
  const Feature shown[] = {{"avx2", "avx2"},
                           {"fma", "fma"},
                           {"avx512f", "avx512f"},
                           {"avx512bw", "avx512bw"},
                           {"avx512vl", "avx512vl"},
                           {"avx512bf16", "avx512_bf16"},
                           {"avx512fp16", "avx512_fp16"},
                           {"amx-bf16", "amx_bf16"}};
  std::vector<std::string> have;
  for (const Feature& f : shown) {
    if (Supports(f.builtin)) have.push_back(f.shown);
  }
  return have.empty() ? "no avx2" : absl::StrJoin(have, " ");
}

}  // namespace sift::kernels
