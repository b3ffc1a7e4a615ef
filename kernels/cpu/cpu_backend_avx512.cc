// The AVX-512 variant of the CPU backend: x86-64-v4 (x86-64-v3 + AVX-512 F, BW, CD, DQ, VL) with
// 512-bit vectors preferred, selected where the CPU has all of them (cpu_isa.h).
#include "kernels/cpu/cpu_backend_variant.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target( \
    "avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt,sse4.2,avx512f,avx512bw,avx512cd,avx512dq,avx512vl,prefer-vector-width=512")
#define SIFT_CPU_ISA_NS avx512
#include SIFT_CPU_BACKEND_VARIANT_BODY
#undef SIFT_CPU_ISA_NS
#pragma GCC pop_options
#else
namespace sift::kernels::avx512 {
std::unique_ptr<Backend> CreateCpuBackendVariant(const CpuBackendConfig&) { return nullptr; }
}  // namespace sift::kernels::avx512
#endif
