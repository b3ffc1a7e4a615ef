// kernels/cuda/cuda_dense_plan.h on the CPU (no CUDA link): the row-major -> cuBLAS GEMM mapping
// run through a naive column-major BLAS GEMM (cuBLAS's semantics, with its argument checks) gives
// the reference's row-major GEMM bit for bit, batched too; and the fixed partitions of the
// deterministic reductions cover every element exactly once within the launch limits.
#include "kernels/cuda/cuda_dense_plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/reference/dense_ops.h"

namespace sift::cuda {
namespace {

// The cuBLAS argument checks of cublasGemmEx (column-major): lda >= max(1, rows of the stored
// first operand), likewise ldb, ldc >= max(1, m).
::testing::AssertionResult ValidCublasArgs(const CublasGemmArgs& g) {
  const int64_t rows_a = g.trans_a ? g.k : g.m;
  const int64_t rows_b = g.trans_b ? g.n : g.k;
  if (g.lda < std::max<int64_t>(1, rows_a)) {
    return ::testing::AssertionFailure() << "lda " << g.lda << " < " << rows_a;
  }
  if (g.ldb < std::max<int64_t>(1, rows_b)) {
    return ::testing::AssertionFailure() << "ldb " << g.ldb << " < " << rows_b;
  }
  if (g.ldc < std::max<int64_t>(1, g.m)) {
    return ::testing::AssertionFailure() << "ldc " << g.ldc << " < " << g.m;
  }
  return ::testing::AssertionSuccess();
}

// Column-major C = alpha op(A) op(B) + beta C as BLAS defines it (element (i, j) of a matrix with
// leading dimension ld at i + j * ld), summed in double in increasing l like reference::Gemm;
// every read is bounds-checked against the buffers' sizes.
void NaiveColumnMajorGemm(const CublasGemmArgs& g, float alpha, const std::vector<float>& a,
                          int64_t a_offset, const std::vector<float>& b, int64_t b_offset,
                          float beta, std::vector<float>* c, int64_t c_offset) {
  auto at = [](const std::vector<float>& v, int64_t i) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, static_cast<int64_t>(v.size()));
    return v.at(static_cast<size_t>(i));
  };
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < g.k; ++l) {
        const float av =
            g.trans_a ? at(a, a_offset + l + i * g.lda) : at(a, a_offset + i + l * g.lda);
        const float bv =
            g.trans_b ? at(b, b_offset + j + l * g.ldb) : at(b, b_offset + l + j * g.ldb);
        s += static_cast<double>(av) * static_cast<double>(bv);
      }
      float& cv = c->at(static_cast<size_t>(c_offset + i + j * g.ldc));
      const double old = beta == 0.0f ? 0.0 : static_cast<double>(beta) * cv;
      cv = static_cast<float>(static_cast<double>(alpha) * s + old);
    }
  }
}

std::vector<float> RandomVector(Rng* rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng->Uniform() * 2.0 - 1.0);
  return v;
}

struct GemmCase {
  int64_t m, n, k;
  int64_t pad;  // extra floats per row of every operand (ld = width + pad)
  int64_t batch;
};

TEST(RowMajorGemmOnCublasTest, MatchesTheReferenceRowMajorGemmForEveryTransposeAndStride) {
  Rng rng(17);
  const GemmCase cases[] = {{1, 1, 1, 0, 1}, {3, 5, 7, 0, 1}, {7, 3, 5, 2, 1}, {16, 9, 33, 3, 1},
                            {4, 6, 2, 1, 3}, {1, 8, 5, 0, 2}, {9, 1, 4, 5, 4}, {12, 10, 1, 0, 2}};
  for (const GemmCase& gc : cases) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(::testing::Message()
                     << "m " << gc.m << " n " << gc.n << " k " << gc.k << " pad " << gc.pad
                     << " batch " << gc.batch << " trans_a " << ta << " trans_b " << tb);
        // Row-major storage: A is [m,k] or [k,m], B [k,n] or [n,k], C [m,n].
        const int64_t a_rows = ta ? gc.k : gc.m, a_cols = ta ? gc.m : gc.k;
        const int64_t b_rows = tb ? gc.n : gc.k, b_cols = tb ? gc.k : gc.n;
        const int64_t lda = a_cols + gc.pad, ldb = b_cols + gc.pad, ldc = gc.n + gc.pad;
        // Batches one float apart beyond the matrix (odd strides on purpose).
        const int64_t stride_a = a_rows * lda + 1, stride_b = b_rows * ldb + 3;
        const int64_t stride_c = gc.m * ldc + 2;
        const std::vector<float> a = RandomVector(&rng, stride_a * gc.batch);
        const std::vector<float> b = RandomVector(&rng, stride_b * gc.batch);
        const std::vector<float> c0 = RandomVector(&rng, stride_c * gc.batch);
        for (const float beta : {0.0f, 0.75f}) {
          const float alpha = 1.5f;
          std::vector<float> expected = c0;
          std::vector<float> actual = c0;
          for (int64_t p = 0; p < gc.batch; ++p) {
            kernels::reference::Gemm<float>(ta != 0, tb != 0, gc.m, gc.n, gc.k, alpha,
                                            a.data() + p * stride_a, lda, b.data() + p * stride_b,
                                            ldb, beta, expected.data() + p * stride_c, ldc);
          }
          const CublasGemmArgs g =
              RowMajorGemmOnCublas(ta != 0, tb != 0, gc.m, gc.n, gc.k, a.data(), lda, stride_a,
                                   b.data(), ldb, stride_b, ldc, stride_c);
          ASSERT_TRUE(ValidCublasArgs(g));
          ASSERT_TRUE(FitsCublasInt(g, gc.batch));
          // cuBLAS's operands are the row-major call's B and A.
          ASSERT_EQ(g.a, b.data());
          ASSERT_EQ(g.b, a.data());
          for (int64_t p = 0; p < gc.batch; ++p) {
            NaiveColumnMajorGemm(g, alpha, b, p * g.stride_a, a, p * g.stride_b, beta, &actual,
                                 p * g.stride_c);
          }
          ASSERT_EQ(actual, expected) << "beta " << beta;
        }
      }
    }
  }
}

TEST(RowMajorGemmOnCublasTest, BetaZeroIgnoresNaNInC) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};  // 2x2 each
  std::vector<float> c(4, std::numeric_limits<float>::quiet_NaN());
  const CublasGemmArgs g =
      RowMajorGemmOnCublas(false, false, 2, 2, 2, a.data(), 2, 0, b.data(), 2, 0, 2, 0);
  NaiveColumnMajorGemm(g, 1.0f, b, 0, a, 0, 0.0f, &c, 0);
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
}

TEST(RowMajorGemmOnCublasTest, FitsCublasIntRejectsWhatIntCannotHold) {
  const int64_t big = int64_t{std::numeric_limits<int>::max()} + 1;
  const CublasGemmArgs ok = RowMajorGemmOnCublas(false, false, 4096, 512, 1024, nullptr, 1024, 0,
                                                 nullptr, 512, 0, 512, 0);
  EXPECT_TRUE(FitsCublasInt(ok, 1));
  EXPECT_TRUE(FitsCublasInt(ok, std::numeric_limits<int>::max()));
  EXPECT_FALSE(FitsCublasInt(ok, big));
  CublasGemmArgs rows = ok;
  rows.n = big;  // the row-major call's m
  EXPECT_FALSE(FitsCublasInt(rows, 1));
  CublasGemmArgs ld = ok;
  ld.ldb = big;
  EXPECT_FALSE(FitsCublasInt(ld, 1));
  CublasGemmArgs negative = ok;
  negative.k = -1;
  EXPECT_FALSE(FitsCublasInt(negative, 1));
}

TEST(ElementwisePlanTest, BlocksStayWithinTheGridLimit) {
  EXPECT_EQ(ElementwiseBlocks(1), 1);
  EXPECT_EQ(ElementwiseBlocks(kElementwiseThreads), 1);
  EXPECT_EQ(ElementwiseBlocks(kElementwiseThreads + 1), 2);
  EXPECT_EQ(ElementwiseBlocks(int64_t{1} << 40), kMaxElementwiseBlocks);
  EXPECT_LE(kMaxElementwiseBlocks, 65535);
}

TEST(ElementwisePlanTest, DivModMatchesIntegerDivisionOnBothPaths) {
  const int64_t limit32 = int64_t{1} << 31;
  for (const int64_t i :
       {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{4095}, int64_t{4096}, limit32 - 1, limit32,
        limit32 + 5, int64_t{3000000000}, (int64_t{1} << 40) + 12345}) {
    for (const int64_t d : {int64_t{1}, int64_t{3}, int64_t{32}, int64_t{4096}, int64_t{999983},
                            limit32 - 1, limit32, int64_t{1} << 35}) {
      int64_t q = -1, r = -1;
      DivMod(i, d, &q, &r);
      EXPECT_EQ(q, i / d) << i << " / " << d;
      EXPECT_EQ(r, i % d) << i << " % " << d;
    }
  }
}

// The grid-stride loop of the reduction kernels visits every element exactly once, each thread's
// elements in increasing order.
TEST(ReducePlanTest, ThreadsCoverEveryElementOnce) {
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{100000},
                          int64_t{262144}, int64_t{262145}, int64_t{1000003}}) {
    SCOPED_TRACE(n);
    const int64_t blocks = ReduceBlocks(n);
    ASSERT_GE(blocks, 1);
    ASSERT_LE(blocks, kMaxReduceBlocks);
    EXPECT_EQ(ReducePartialDoubles(n), blocks + 1);
    const int64_t threads = blocks * kReduceThreads;
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (int64_t t = 0; t < threads; ++t) {
      int64_t last = -1;
      for (int64_t i = t; i < n; i += threads) {
        ASSERT_GT(i, last);
        last = i;
        ++seen[static_cast<size_t>(i)];
      }
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << i;
  }
  EXPECT_EQ(ReduceBlocks(int64_t{1} << 40), kMaxReduceBlocks);
}

TEST(ReducePlanTest, BlockTreeSumAddsEveryThreadsValue) {
  std::vector<double> v(kReduceThreads);
  double expected = 0.0;
  for (int t = 0; t < kReduceThreads; ++t) {
    v[static_cast<size_t>(t)] = static_cast<double>((t * 37) % 101) - 50.0;  // exact in double
    expected += v[static_cast<size_t>(t)];
  }
  BlockTreeSum(v.data());
  EXPECT_EQ(v[0], expected);
}

TEST(ColumnSumPlanTest, ChunksCoverEveryRowOnceWithinTheGridLimit) {
  for (const int64_t rows :
       {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{4096}, int64_t{262144},
        int64_t{262145}, int64_t{10000019}, int64_t{3000000000}}) {
    SCOPED_TRACE(rows);
    const ColumnSumPlan p = PlanColumnSums(rows);
    EXPECT_GE(p.chunk_rows, kMinColumnChunkRows);
    EXPECT_GE(p.chunks, 1);
    EXPECT_LE(p.chunks, kMaxColumnChunks);
    EXPECT_LE(kMaxColumnChunks, 65535);              // grid.y
    EXPECT_GE(p.chunks * p.chunk_rows, rows);        // every row in a chunk
    EXPECT_LT((p.chunks - 1) * p.chunk_rows, rows);  // no empty chunk
    EXPECT_EQ(ColumnPartialDoubles(rows, 7), p.chunks * 7);
  }
  // Small inputs stay in one chunk; the chunk size grows only past kMaxColumnChunks chunks.
  EXPECT_EQ(PlanColumnSums(kMinColumnChunkRows).chunks, 1);
  EXPECT_EQ(PlanColumnSums(kMinColumnChunkRows * kMaxColumnChunks).chunk_rows, kMinColumnChunkRows);
  EXPECT_EQ(PlanColumnSums(kMinColumnChunkRows * kMaxColumnChunks + 1).chunk_rows,
            kMinColumnChunkRows + 1);
}

}  // namespace
}  // namespace sift::cuda
