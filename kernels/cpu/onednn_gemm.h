// OneDnnGemm: row-major GEMMs C = alpha op(A) op(B) + beta C on oneDNN's matmul primitive
// (Debian's libdnnl 2.6), one primitive per distinct problem (shape, strides, transposes, alpha,
// beta, input type), created on first use and kept. oneDNN picks its kernel from the CPU's
// feature bits at run time (brgemm on AVX-512 / AMX, its jit gemm on AVX2), not from a table of
// CPU models.
//
// Threads: Run() computes on the calling thread only. oneDNN's CPU runtime is OpenMP; Run() sets
// the calling thread's OpenMP team size to 1, so no OpenMP thread is ever started: the callers
// (CpuBackend, parallel_gemm.h) split a product into blocks over their own pool, one set of worker
// threads for every op. Thread-safe: any number of threads may Run() concurrently (each has its
// own oneDNN stream and scratchpad; primitives are immutable once created).
// Determinism: a primitive computes every element of C with one fixed kernel and order, so the
// same problem and inputs give bit-identical results on one machine (and one oneDNN ISA).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"

namespace sift::kernels {

// How A and B are stored: fp32, or bf16 (uint16 bit patterns; products are exact in fp32 and
// accumulate in fp32, C is fp32).
enum class GemmInputType { kF32 = 0, kBf16 = 1 };

// One GEMM problem. A is [m,k] row-major with row stride lda (stored [k,m] when trans_a); B is
// [k,n] with ldb (stored [n,k] when trans_b); C is [m,n] with ldc. beta == 0 ignores C's old
// contents (NaN-safe). REQUIRES: m, n, k >= 1 and strides that fit.
struct GemmProblem {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  GemmInputType type = GemmInputType::kF32;

  bool operator==(const GemmProblem& o) const {
    return trans_a == o.trans_a && trans_b == o.trans_b && m == o.m && n == o.n && k == o.k &&
           lda == o.lda && ldb == o.ldb && ldc == o.ldc && alpha == o.alpha && beta == o.beta &&
           type == o.type;
  }
  template <typename H>
  friend H AbslHashValue(H h, const GemmProblem& p) {
    return H::combine(std::move(h), p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb, p.ldc,
                      p.alpha, p.beta, static_cast<int>(p.type));
  }
};

class OneDnnGemm {
 public:
  OneDnnGemm();
  ~OneDnnGemm();
  OneDnnGemm(const OneDnnGemm&) = delete;
  OneDnnGemm& operator=(const OneDnnGemm&) = delete;

  // C = alpha op(A) op(B) + beta C on this thread; a and b point at floats or bf16 patterns as
  // p.type says. INTERNAL naming the problem and oneDNN's status when no primitive can be created
  // or run (C is then unspecified).
  Status Run(const GemmProblem& p, const void* a, const void* b, float* c);
  // The implementation oneDNN chose for `p` (e.g. "brg:avx512_core", "gemm:jit"), creating the
  // primitive if needed.
  StatusOr<std::string> ImplName(const GemmProblem& p);
  // Distinct problems created so far.
  int64_t cached_problems() const;
  // The implementations chosen so far, each with how many distinct problems use it, by name.
  std::vector<std::pair<std::string, int64_t>> ImplCounts() const;

  // oneDNN's version ("2.6.3"), the ISA its kernels use on this CPU ("avx2", "avx512_core",
  // "avx512_core_amx", ...; ONEDNN_MAX_CPU_ISA in the environment caps it), and whether that ISA
  // has bf16 dot-product instructions (AVX512-BF16 or AMX-BF16), i.e. bf16 GEMMs run natively.
  static std::string Version();
  static std::string EffectiveIsa();
  static bool Bf16Native();

 private:
  struct Entry;
  StatusOr<Entry*> Find(const GemmProblem& p);

  mutable std::mutex mu_;
  absl::flat_hash_map<GemmProblem, std::unique_ptr<Entry>> cache_;  // guarded by mu_
};

// "m x n x k, trans a/b, lda/ldb/ldc, alpha, beta, type": for error messages.
std::string DescribeGemmProblem(const GemmProblem& p);

}  // namespace sift::kernels
