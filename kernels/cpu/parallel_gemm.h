// ParallelSgemm: C = alpha op(A) op(B) + beta C (row-major) with single-threaded OpenBLAS calls
// on our own thread pool, one contiguous block of C rows (or, for short-and-wide products such as
// weight gradients, of C columns) per thread. Why: OpenBLAS's own threads spin-wait between calls
// and fight the pool that runs the element-wise work in between (K2 measured ~20% of a GRU step
// in sched_yield); one set of threads for everything removes that. The partition is fixed by the
// thread count and every C element is computed by one call over the full k, so results are
// deterministic. REQUIRES: openblas_set_num_threads(1) (CpuBackend's constructor does it); called
// from outside the pool's tasks.
#pragma once

#include <cstdint>

#include "common/thread_pool.h"

namespace sift::kernels {

void ParallelSgemm(ThreadPool& pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc);

}  // namespace sift::kernels
