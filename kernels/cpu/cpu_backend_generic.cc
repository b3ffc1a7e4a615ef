// The generic variant of the CPU backend: the x86-64 baseline (SSE2), or whatever the target
// architecture's baseline is. It runs on every CPU.
#include "kernels/cpu/cpu_backend_variant.h"

#define SIFT_CPU_ISA_NS generic
#include SIFT_CPU_BACKEND_VARIANT_BODY
#undef SIFT_CPU_ISA_NS
