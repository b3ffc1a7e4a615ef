// Everything the variant sources (cpu_backend_{generic,avx2,avx512}.cc) use, included BEFORE
// their `#pragma GCC target` region: functions defined in these headers (the standard library,
// Abseil, vector_math.h, the reference's Adam step size) keep the baseline ISA when emitted out of
// line — the same definition in every variant — and take the variant's ISA only where inlined.
// Only the code defined in the region (cpu_backend_class.inc and the *_ops.inc files, in the
// variant's own namespace) is compiled for the wider ISA.
#pragma once

#include <pmmintrin.h>
#include <xmmintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/onednn_gemm.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/reference/dense_ops.h"

// The variant's body: the class, then its ops. SIFT_CPU_ISA_NS names the variant's namespace.
#define SIFT_CPU_BACKEND_VARIANT_BODY "kernels/cpu/cpu_backend_variant_body.inc"
