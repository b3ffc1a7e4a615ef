#include "kernels/cpu/onednn_gemm.h"

#include <omp.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "oneapi/dnnl/dnnl.h"

namespace sift::kernels {
namespace {

// oneDNN's CPU engine holds no state of ours (it names the device); one per process, never
// destroyed, so the per-thread streams below can never outlive it.
dnnl_engine_t Engine() {
  static dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success)
      return static_cast<dnnl_engine_t>(nullptr);
    return e;
  }();
  return engine;
}

// Per thread: a stream (oneDNN streams are not thread-safe) and the scratchpad the primitives run
// with (user-managed, so two threads running one primitive never share one).
struct ThreadState {
  dnnl_stream_t stream = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  ~ThreadState() {
    if (stream != nullptr) dnnl_stream_destroy(stream);
    std::free(scratch);
  }
};

ThreadState& ThisThread() {
  thread_local ThreadState state;
  return state;
}

const char* StatusName(dnnl_status_t s) {
  switch (s) {
    case dnnl_success:
      return "success";
    case dnnl_out_of_memory:
      return "out of memory";
    case dnnl_invalid_arguments:
      return "invalid arguments";
    case dnnl_unimplemented:
      return "unimplemented";
    case dnnl_iterator_ends:
      return "iterator ends";
    case dnnl_runtime_error:
      return "runtime error";
    case dnnl_not_required:
      return "not required";
  }
  return "unknown status";
}

Status Fail(const GemmProblem& p, const char* what, dnnl_status_t s) {
  return absl::InternalError(absl::StrCat("oneDNN matmul (", DescribeGemmProblem(p), "): ", what,
                                          " failed: ", StatusName(s)));
}

#define SIFT_DNNL_OR_RETURN(p, call)            \
  do {                                          \
    const dnnl_status_t dnnl_status__ = (call); \
    if (dnnl_status__ != dnnl_success) {        \
      return Fail((p), #call, dnnl_status__);   \
    }                                           \
  } while (0)

}  // namespace

std::string DescribeGemmProblem(const GemmProblem& p) {
  return absl::StrFormat("%d x %d x %d, trans %c%c, ld %d/%d/%d, alpha %g, beta %g, %s", p.m, p.n,
                         p.k, p.trans_a ? 'T' : 'N', p.trans_b ? 'T' : 'N', p.lda, p.ldb, p.ldc,
                         p.alpha, p.beta, p.type == GemmInputType::kBf16 ? "bf16" : "f32");
}

struct OneDnnGemm::Entry {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t a_md{}, b_md{}, c_md{};
  size_t scratch_bytes = 0;
  std::string impl;
  ~Entry() {
    if (primitive != nullptr) dnnl_primitive_destroy(primitive);
  }
};

OneDnnGemm::OneDnnGemm() = default;
OneDnnGemm::~OneDnnGemm() = default;

int64_t OneDnnGemm::cached_problems() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(cache_.size());
}

std::vector<std::pair<std::string, int64_t>> OneDnnGemm::ImplCounts() const {
  std::map<std::string, int64_t> counts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [problem, entry] : cache_) ++counts[entry->impl];
  }
  return {counts.begin(), counts.end()};
}

StatusOr<OneDnnGemm::Entry*> OneDnnGemm::Find(const GemmProblem& p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(p);
  if (it != cache_.end()) return it->second.get();
  if (Engine() == nullptr) {
    return absl::InternalError("oneDNN: no CPU engine (dnnl_engine_create failed)");
  }
  auto e = std::make_unique<Entry>();
  const dnnl_data_type_t in_type = p.type == GemmInputType::kBf16 ? dnnl_bf16 : dnnl_f32;
  // Logical A [m,k], B [k,n], C [m,n]; a transposed operand is the same memory with swapped
  // strides.
  const dnnl_dims_t a_dims = {p.m, p.k}, b_dims = {p.k, p.n}, c_dims = {p.m, p.n};
  const dnnl_dims_t a_strides = {p.trans_a ? 1 : p.lda, p.trans_a ? p.lda : 1};
  const dnnl_dims_t b_strides = {p.trans_b ? 1 : p.ldb, p.trans_b ? p.ldb : 1};
  const dnnl_dims_t c_strides = {p.ldc, 1};
  SIFT_DNNL_OR_RETURN(p, dnnl_memory_desc_init_by_strides(&e->a_md, 2, a_dims, in_type, a_strides));
  SIFT_DNNL_OR_RETURN(p, dnnl_memory_desc_init_by_strides(&e->b_md, 2, b_dims, in_type, b_strides));
  SIFT_DNNL_OR_RETURN(p,
                      dnnl_memory_desc_init_by_strides(&e->c_md, 2, c_dims, dnnl_f32, c_strides));
  dnnl_matmul_desc_t desc;
  SIFT_DNNL_OR_RETURN(p, dnnl_matmul_desc_init(&desc, &e->a_md, &e->b_md, nullptr, &e->c_md));

  dnnl_primitive_attr_t attr = nullptr;
  SIFT_DNNL_OR_RETURN(p, dnnl_primitive_attr_create(&attr));
  dnnl_post_ops_t post_ops = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  Status status = [&]() -> Status {
    SIFT_DNNL_OR_RETURN(p,
                        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (p.alpha != 1.0f) {
      SIFT_DNNL_OR_RETURN(p, dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p.alpha));
    }
    if (p.beta != 0.0f) {  // C = alpha AB + beta C; without it oneDNN overwrites C
      SIFT_DNNL_OR_RETURN(p, dnnl_post_ops_create(&post_ops));
      SIFT_DNNL_OR_RETURN(p, dnnl_post_ops_append_sum(post_ops, p.beta));
      SIFT_DNNL_OR_RETURN(p, dnnl_primitive_attr_set_post_ops(attr, post_ops));
    }
    SIFT_DNNL_OR_RETURN(p, dnnl_primitive_desc_create(&pd, &desc, attr, Engine(), nullptr));
    const char* impl = nullptr;
    SIFT_DNNL_OR_RETURN(p, dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    e->impl = impl != nullptr ? impl : "?";
    const dnnl_memory_desc_t* scratch_md =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = scratch_md != nullptr ? dnnl_memory_desc_get_size(scratch_md) : 0;
    SIFT_DNNL_OR_RETURN(p, dnnl_primitive_create(&e->primitive, pd));
    return absl::OkStatus();
  }();
  if (pd != nullptr) dnnl_primitive_desc_destroy(pd);
  if (post_ops != nullptr) dnnl_post_ops_destroy(post_ops);
  dnnl_primitive_attr_destroy(attr);
  SIFT_RETURN_IF_ERROR(status);
  Entry* raw = e.get();
  cache_.emplace(p, std::move(e));
  return raw;
}

StatusOr<std::string> OneDnnGemm::ImplName(const GemmProblem& p) {
  SIFT_ASSIGN_OR_RETURN(Entry * e, Find(p));
  return e->impl;
}

Status OneDnnGemm::Run(const GemmProblem& p, const void* a, const void* b, float* c) {
  // One thread: oneDNN's parallel sections run inline, no OpenMP team is started (the callers
  // parallelise over their own pool). A per-thread setting, so set on every thread that calls.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  SIFT_ASSIGN_OR_RETURN(Entry * e, Find(p));
  ThreadState& ts = ThisThread();
  if (ts.stream == nullptr) {
    SIFT_DNNL_OR_RETURN(p, dnnl_stream_create(&ts.stream, Engine(), dnnl_stream_default_flags));
  }
  if (ts.scratch_bytes < e->scratch_bytes) {
    std::free(ts.scratch);
    ts.scratch_bytes = (e->scratch_bytes + 4095) / 4096 * 4096;
    ts.scratch = std::aligned_alloc(64, ts.scratch_bytes);
    if (ts.scratch == nullptr) {
      ts.scratch_bytes = 0;
      return absl::ResourceExhaustedError(absl::StrCat("oneDNN matmul (", DescribeGemmProblem(p),
                                                       "): ", e->scratch_bytes,
                                                       " bytes of scratchpad"));
    }
  }
  dnnl_memory_t mem[4] = {nullptr, nullptr, nullptr, nullptr};
  Status status = [&]() -> Status {
    SIFT_DNNL_OR_RETURN(p, dnnl_memory_create(&mem[0], &e->a_md, Engine(), const_cast<void*>(a)));
    SIFT_DNNL_OR_RETURN(p, dnnl_memory_create(&mem[1], &e->b_md, Engine(), const_cast<void*>(b)));
    SIFT_DNNL_OR_RETURN(p, dnnl_memory_create(&mem[2], &e->c_md, Engine(), c));
    int nargs = 3;
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}, {0, nullptr}};
    if (e->scratch_bytes > 0) {
      const dnnl_memory_desc_t* md = nullptr;
      dnnl_memory_desc_t scratch_md;
      const dnnl_dims_t dims = {static_cast<dnnl_dim_t>(e->scratch_bytes)};
      SIFT_DNNL_OR_RETURN(p, dnnl_memory_desc_init_by_tag(&scratch_md, 1, dims, dnnl_u8, dnnl_a));
      md = &scratch_md;
      SIFT_DNNL_OR_RETURN(p, dnnl_memory_create(&mem[3], md, Engine(), ts.scratch));
      args[3] = {DNNL_ARG_SCRATCHPAD, mem[3]};
      nargs = 4;
    }
    SIFT_DNNL_OR_RETURN(p, dnnl_primitive_execute(e->primitive, ts.stream, nargs, args));
    SIFT_DNNL_OR_RETURN(p, dnnl_stream_wait(ts.stream));
    return absl::OkStatus();
  }();
  for (dnnl_memory_t m : mem) {
    if (m != nullptr) dnnl_memory_destroy(m);
  }
  return status;
}

std::string OneDnnGemm::Version() {
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat(v->major, ".", v->minor, ".", v->patch);
}

std::string OneDnnGemm::EffectiveIsa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_all:
      return "all";
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
  }
  return absl::StrCat("isa 0x", absl::Hex(static_cast<int>(dnnl_get_effective_cpu_isa())));
}

bool OneDnnGemm::Bf16Native() {
  // The ISA values are nested bit masks: AMX's includes AVX512-BF16's.
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & bf16) == bf16;
}

}  // namespace sift::kernels
