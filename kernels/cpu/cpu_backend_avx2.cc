// The AVX2 variant of the CPU backend: x86-64-v3 (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE),
// selected where the CPU has all of them (cpu_isa.h).
#include "kernels/cpu/cpu_backend_variant.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt,sse4.2")
#define SIFT_CPU_ISA_NS avx2
#include SIFT_CPU_BACKEND_VARIANT_BODY
#undef SIFT_CPU_ISA_NS
#pragma GCC pop_options
#else
namespace sift::kernels::avx2 {
std::unique_ptr<Backend> CreateCpuBackendVariant(const CpuBackendConfig&) { return nullptr; }
}  // namespace sift::kernels::avx2
#endif
