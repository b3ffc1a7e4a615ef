#include "tests/util/device_sim_backend.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/util/mirrored_backend.h"

namespace sift::testing {

using kernels::AdamHyper;
using kernels::BackendBuffer;
using kernels::DenseDims;
using kernels::RnnDims;

struct DeviceSimBackend::State {
  // Held by every op, copy and channel call (channels may run on other threads); recursive, as
  // the calls nest (a channel call checks pointers with IsTracked). std rather than absl::Mutex,
  // as in common/thread_pool.h (TSan cannot see Debian's uninstrumented Abseil).
  std::recursive_mutex mu;
  std::map<uintptr_t, int64_t> regions;  // start -> requested bytes, of the live allocations
  bool protect = true;                   // allocations are PROT_NONE outside ops and copies
  DeviceSimStats stats;
  std::map<uintptr_t, int64_t> last_use;   // start -> number (stats.ops) of the last op using it
  std::map<uintptr_t, int64_t> in_flight;  // start -> uploads queued into it, not landed
  std::map<uintptr_t, int64_t> reading;    // start -> downloads of it not yet synchronized
  // start -> the allocation's serial number: a copy queued into memory freed since (and perhaps
  // mapped again at the same address) is dropped, not landed in the new allocation.
  std::map<uintptr_t, int64_t> serial;
  int64_t next_serial = 0;
};

namespace {

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// The live allocation whose start is the last at or before `p`, or end().
std::map<uintptr_t, int64_t>::const_iterator Enclosing(const std::map<uintptr_t, int64_t>& regions,
                                                       const void* p) {
  auto it = regions.upper_bound(Addr(p));
  if (it == regions.begin()) return regions.end();
  return std::prev(it);
}

// Bytes mapped for an allocation: whole pages.
size_t Mapped(int64_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (static_cast<size_t>(bytes) + page - 1) / page * page;
}

void SetAccess(uintptr_t start, int64_t bytes, bool open) {
  if (mprotect(reinterpret_cast<void*>(start), Mapped(bytes),
               open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::perror("DeviceSimBackend: mprotect");
    std::abort();
  }
}

// SIGSEGV: most likely the host touched device memory (async-signal-safe: write(2) only), then
// the default action (SA_RESETHAND: the faulting access repeats and kills the process).
void OnSegv(int, siginfo_t* info, void*) {
  char msg[256] = "DeviceSimBackend: SIGSEGV at 0x";
  size_t n = std::strlen(msg);
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  for (int shift = 60; shift >= 0; shift -= 4) msg[n++] = "0123456789abcdef"[(a >> shift) & 15];
  const char tail[] =
      ": the host touched memory from Allocate outside an op or copy (device memory; it is "
      "PROT_NONE between ops), or another bad address\n";
  std::memcpy(msg + n, tail, sizeof(tail) - 1);
  n += sizeof(tail) - 1;
  if (write(2, msg, n) < 0) return;
}

void InstallSegvHandler() {
  static const bool installed = [] {
    struct sigaction sa = {};
    sa.sa_sigaction = OnSegv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGSEGV, &sa, nullptr) == 0;
  }();
  (void)installed;
}

// Opens (read/write) the allocations an op or copy uses, and closes them again when it ends.
class Access {
 public:
  explicit Access(const std::shared_ptr<DeviceSimBackend::State>& state) : state_(*state) {}
  Access(const Access&) = delete;
  Access& operator=(const Access&) = delete;
  ~Access() {
    for (uintptr_t start : opened_) SetAccess(start, state_.regions.at(start), false);
  }
  // The allocation holding p (REQUIRES: a tracked pointer).
  void Open(const void* p) {
    if (!state_.protect) return;
    const uintptr_t start = Enclosing(state_.regions, p)->first;
    if (std::find(opened_.begin(), opened_.end(), start) != opened_.end()) return;
    SetAccess(start, state_.regions.at(start), true);
    opened_.push_back(start);
  }

 private:
  DeviceSimBackend::State& state_;
  std::vector<uintptr_t> opened_;
};

}  // namespace

// The argument checks of one op: each pointer with its extent. ok() is false after a failed
// check; otherwise it opens the allocations of the arguments checked so far, until the op ends.
class DeviceSimBackend::Check {
 public:
  Check(DeviceSimBackend& be, const char* op)
      : lock_(be.state_->mu), be_(be), op_(op), access_(be.state_) {
    ++be.state_->stats.ops;
  }
  Check(const Check&) = delete;
  Check& operator=(const Check&) = delete;

  // `count` elements of T at p (nothing to check for a null p or an empty extent).
  template <typename T>
  void Arg(const T* p, int64_t count, const char* what) {
    if (p == nullptr || count <= 0) return;
    const int64_t bytes = count * static_cast<int64_t>(sizeof(T));
    if (be_.IsTracked(p, bytes)) {
      const uintptr_t start = Enclosing(be_.state_->regions, p)->first;
      be_.state_->last_use[start] = be_.state_->stats.ops;
      if (be_.state_->in_flight[start] > 0) {
        ok_ = false;
        be_.Fail(op_, what,
                 "memory with an upload in flight (the backend must WaitFence on the channel's "
                 "fence before an op touches it)");
        return;
      }
      if (be_.state_->reading[start] > 0) {
        ok_ = false;
        be_.Fail(op_, what,
                 "memory a channel's download may still be reading (its Synchronize must come "
                 "before an op touches it)");
        return;
      }
      pending_.push_back(p);
      return;
    }
    ok_ = false;
    be_.Fail(op_, what, be_.DescribeMemory(p, bytes));
  }
  bool ok() {
    if (!ok_) return false;
    for (const void* p : pending_) access_.Open(p);
    pending_.clear();
    return true;
  }

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  DeviceSimBackend& be_;
  const char* op_;
  Access access_;
  std::vector<const void*> pending_;
  bool ok_ = true;
};

DeviceSimBackend::DeviceSimBackend(std::unique_ptr<kernels::Backend> inner, bool protect)
    : inner_(std::move(inner)),
      name_(absl::StrCat(inner_->name(), "-device-sim")),
      state_(std::make_shared<State>()) {
  state_->protect = protect;
  if (protect) InstallSegvHandler();
}

DeviceSimBackend::~DeviceSimBackend() {
  state_->stats.live_at_destruction = state_->stats.live_allocations;
}

std::shared_ptr<const DeviceSimStats> DeviceSimBackend::stats() const {
  return std::shared_ptr<const DeviceSimStats>(state_, &state_->stats);
}

bool DeviceSimBackend::IsTracked(const void* p, int64_t bytes) const {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  auto it = Enclosing(state_->regions, p);
  if (it == state_->regions.end()) return false;
  const uintptr_t start = it->first, end = start + static_cast<uintptr_t>(it->second);
  return Addr(p) < end && bytes >= 0 && static_cast<uintptr_t>(bytes) <= end - Addr(p);
}

std::string DeviceSimBackend::DescribeMemory(const void* p, int64_t bytes) const {
  auto it = Enclosing(state_->regions, p);
  if (it == state_->regions.end() || Addr(p) >= it->first + static_cast<uintptr_t>(it->second)) {
    return absl::StrCat(bytes, " bytes at 0x", absl::Hex(Addr(p)),
                        ": host memory, not from Allocate");
  }
  return absl::StrCat("bytes [", Addr(p) - it->first, ", ", Addr(p) - it->first + bytes,
                      ") of an allocation of ", it->second, " bytes: past its end");
}

// ---- Copy channels and fences --------------------------------------------------------------

namespace {

// A channel's queued uploads, shared with the fences it records.
struct SimQueue {
  struct Upload {
    std::vector<char> staged;
    void* dst;
    int64_t number;  // 1, 2, ... in queue order
    int64_t serial;  // of dst's allocation
  };
  std::deque<Upload> pending;  // not landed, in order
  int64_t queued = 0;          // uploads ever queued
};

// A fence's handle: a backend fence (compute_op >= 0: ops up to that number precede it) or a
// channel's (its uploads up to `upload` precede it).
struct SimFence {
  int64_t compute_op = -1;
  std::shared_ptr<SimQueue> queue;
  int64_t upload = 0;
};

// Lands (copies into backend memory) the uploads of `queue` numbered <= up_to; returns how many.
// REQUIRES: state.mu held.
int64_t Land(const std::shared_ptr<DeviceSimBackend::State>& state, SimQueue* queue,
             int64_t up_to) {
  int64_t landed = 0;
  while (!queue->pending.empty() && queue->pending.front().number <= up_to) {
    SimQueue::Upload& u = queue->pending.front();
    auto it = Enclosing(state->regions, u.dst);
    // (Memory freed since: nothing to land in.)
    if (it != state->regions.end() && state->serial[it->first] == u.serial) {
      Access access(state);
      access.Open(u.dst);
      std::memcpy(u.dst, u.staged.data(), u.staged.size());
      --state->in_flight[it->first];
    }
    queue->pending.pop_front();
    ++landed;
  }
  return landed;
}

}  // namespace

class DeviceSimBackend::SimChannel final : public kernels::CopyChannel {
 public:
  explicit SimChannel(DeviceSimBackend& be) : be_(be), queue_(std::make_shared<SimQueue>()) {}
  ~SimChannel() override {
    std::lock_guard<std::recursive_mutex> lock(be_.state_->mu);
    Land(be_.state_, queue_.get(), queue_->queued);  // a GPU finishes them too
  }

  Status Upload(const void* src, void* dst, int64_t bytes) override {
    std::lock_guard<std::recursive_mutex> lock(be_.state_->mu);
    SIFT_RETURN_IF_ERROR(CheckCopy("CopyChannel::Upload", src, dst, bytes, /*to_backend=*/true));
    if (bytes == 0) return absl::OkStatus();
    ++be_.state_->stats.uploads;
    const char* from = static_cast<const char*>(src);
    const uintptr_t start = Enclosing(be_.state_->regions, dst)->first;
    queue_->pending.push_back(
        {std::vector<char>(from, from + bytes), dst, ++queue_->queued, be_.state_->serial[start]});
    ++be_.state_->in_flight[start];
    return absl::OkStatus();
  }

  Status Download(const void* src, void* dst, int64_t bytes) override {
    std::lock_guard<std::recursive_mutex> lock(be_.state_->mu);
    SIFT_RETURN_IF_ERROR(CheckCopy("CopyChannel::Download", src, dst, bytes, /*to_backend=*/false));
    if (bytes == 0) return absl::OkStatus();
    ++be_.state_->stats.downloads;
    Access access(be_.state_);
    access.Open(src);
    const char* from = static_cast<const char*>(src);
    const uintptr_t start = Enclosing(be_.state_->regions, src)->first;
    downloads_.push_back(
        {std::vector<char>(from, from + bytes), dst, start, be_.state_->serial[start]});
    ++be_.state_->reading[start];  // no op may touch it until Synchronize (it races the copy)
    std::memset(dst, 0xff, static_cast<size_t>(bytes));  // NaN until Synchronize
    return absl::OkStatus();
  }

  StatusOr<kernels::Fence> RecordFence() override {
    std::lock_guard<std::recursive_mutex> lock(be_.state_->mu);
    ++be_.state_->stats.fences_recorded;
    auto f = std::make_shared<SimFence>();
    f->queue = queue_;
    f->upload = queue_->queued;
    return kernels::Fence(std::move(f));
  }

  Status WaitFence(const kernels::Fence& fence) override {
    std::lock_guard<std::recursive_mutex> lock(be_.state_->mu);
    if (fence.trivial()) return absl::OkStatus();
    const SimFence* f = static_cast<const SimFence*>(fence.handle());
    if (f->compute_op < 0) {
      be_.Fail("CopyChannel::WaitFence", "fence", "a channel's fence (wait for backend fences)");
      return absl::InvalidArgumentError("CopyChannel::WaitFence: not a backend fence");
    }
    waited_ = std::max(waited_, f->compute_op);
    return absl::OkStatus();
  }

  Status Synchronize() override {
    std::lock_guard<std::recursive_mutex> lock(be_.state_->mu);
    Land(be_.state_, queue_.get(), queue_->queued);
    for (const PendingDownload& d : downloads_) {
      std::memcpy(d.dst, d.staged.data(), d.staged.size());
      auto it = be_.state_->serial.find(d.start);
      if (it != be_.state_->serial.end() && it->second == d.serial) --be_.state_->reading[d.start];
    }
    downloads_.clear();
    return absl::OkStatus();
  }

 private:
  // The pointers of a copy (backend memory on the backend side, host memory on the other), and
  // that no op used the backend side after the last backend fence this channel waited for.
  Status CheckCopy(const char* op, const void* src, const void* dst, int64_t bytes,
                   bool to_backend) {
    if (bytes < 0) {
      be_.Fail(op, "bytes", absl::StrCat(bytes, " < 0"));
      return absl::InvalidArgumentError(absl::StrCat(op, ": negative size"));
    }
    if (bytes == 0) return absl::OkStatus();
    const void* backend_side = to_backend ? dst : src;
    const void* host_side = to_backend ? src : dst;
    const char* backend_name = to_backend ? "dst" : "src";
    if (host_side == nullptr || be_.IsTracked(host_side, 1)) {
      be_.Fail(op, to_backend ? "src" : "dst",
               host_side == nullptr ? "null" : "is backend memory, not host memory");
      return absl::InvalidArgumentError(absl::StrCat(op, ": bad pointers (see the failures)"));
    }
    if (backend_side == nullptr || !be_.IsTracked(backend_side, bytes)) {
      be_.Fail(op, backend_name,
               backend_side == nullptr ? "null" : be_.DescribeMemory(backend_side, bytes));
      return absl::InvalidArgumentError(absl::StrCat(op, ": bad pointers (see the failures)"));
    }
    const uintptr_t start = Enclosing(be_.state_->regions, backend_side)->first;
    const int64_t last = be_.state_->last_use[start];
    if (last > waited_) {
      be_.Fail(op, backend_name,
               absl::StrCat("op #", last, " used this allocation after the last backend fence ",
                            "the channel waited for (after op #", waited_,
                            "): on a GPU the copy could race that op"));
      return absl::InternalError(absl::StrCat(op, ": copy without a fence (see the failures)"));
    }
    return absl::OkStatus();
  }

  DeviceSimBackend& be_;
  std::shared_ptr<SimQueue> queue_;
  int64_t waited_ = 0;  // the newest backend fence waited for: ops up to this number
  struct PendingDownload {
    std::vector<char> staged;  // the data, read when the download was issued
    void* dst;
    uintptr_t start;  // the source's allocation
    int64_t serial;
  };
  std::vector<PendingDownload> downloads_;
};

StatusOr<std::unique_ptr<kernels::CopyChannel>> DeviceSimBackend::CreateCopyChannel(
    int64_t staging_bytes) {
  if (staging_bytes < 0) return absl::InvalidArgumentError("CreateCopyChannel: negative size");
  return std::unique_ptr<kernels::CopyChannel>(std::make_unique<SimChannel>(*this));
}

StatusOr<kernels::Fence> DeviceSimBackend::RecordFence() {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  ++state_->stats.fences_recorded;
  auto f = std::make_shared<SimFence>();
  f->compute_op = state_->stats.ops;
  return kernels::Fence(std::move(f));
}

Status DeviceSimBackend::WaitFence(const kernels::Fence& fence) {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  if (fence.trivial()) return absl::OkStatus();
  const SimFence* f = static_cast<const SimFence*>(fence.handle());
  if (f->queue == nullptr) {
    Fail("WaitFence", "fence", "a backend fence (the backend waits for channel fences)");
    return absl::InvalidArgumentError("DeviceSimBackend::WaitFence: not a channel fence");
  }
  state_->stats.landed_by_fence += Land(state_, f->queue.get(), f->upload);
  return absl::OkStatus();
}

void DeviceSimBackend::Fail(absl::string_view op, absl::string_view what, absl::string_view why) {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  std::string msg = absl::StrCat(op, ": argument ", what, ": ", why);
  ADD_FAILURE() << name_ << " " << msg;
  if (status_.ok()) status_ = absl::InternalError(absl::StrCat(name_, " ", msg));
  state_->stats.failures.push_back(std::move(msg));
}

StatusOr<BackendBuffer> DeviceSimBackend::Allocate(int64_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  if (bytes < 0) return absl::InvalidArgumentError("DeviceSimBackend::Allocate: negative size");
  if (bytes == 0) return BackendBuffer();
  // Whole zeroed pages (page-aligned: at least cuda's 256), closed unless protection is off.
  void* p = mmap(nullptr, Mapped(bytes), state_->protect ? PROT_NONE : PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("DeviceSimBackend: ", bytes, " bytes"));
  }
  state_->regions[Addr(p)] = bytes;
  state_->serial[Addr(p)] = ++state_->next_serial;
  ++state_->stats.allocations;
  ++state_->stats.live_allocations;
  // The deleter holds the state: a buffer freed after the backend still finds it.
  std::shared_ptr<State> state = state_;
  return BackendBuffer(p, bytes, [state, bytes](void* q) {
    std::lock_guard<std::recursive_mutex> lock(state->mu);
    state->regions.erase(Addr(q));
    state->last_use.erase(Addr(q));
    state->in_flight.erase(Addr(q));
    state->reading.erase(Addr(q));
    state->serial.erase(Addr(q));
    --state->stats.live_allocations;
    munmap(q, Mapped(bytes));
  });
}

Status DeviceSimBackend::CopyToBackend(const void* src, void* dst, int64_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  if (bytes < 0) {
    Fail("CopyToBackend", "bytes", absl::StrCat(bytes, " < 0"));
    return absl::InvalidArgumentError("CopyToBackend: negative size");
  }
  if (bytes == 0) return absl::OkStatus();
  ++state_->stats.copies_to_backend;
  bool ok = true;
  if (src == nullptr || IsTracked(src, 1)) {
    Fail("CopyToBackend", "src", src == nullptr ? "null" : "is backend memory, not host memory");
    ok = false;
  }
  if (dst == nullptr || !IsTracked(dst, bytes)) {
    Fail("CopyToBackend", "dst", dst == nullptr ? "null" : DescribeMemory(dst, bytes));
    ok = false;
  }
  if (!ok) return absl::InvalidArgumentError("CopyToBackend: bad pointers (see the failures)");
  Access access(state_);
  access.Open(dst);
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

Status DeviceSimBackend::CopyToHost(const void* src, void* dst, int64_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  if (bytes < 0) {
    Fail("CopyToHost", "bytes", absl::StrCat(bytes, " < 0"));
    return absl::InvalidArgumentError("CopyToHost: negative size");
  }
  if (bytes == 0) return absl::OkStatus();
  ++state_->stats.copies_to_host;
  bool ok = true;
  if (src == nullptr || !IsTracked(src, bytes)) {
    Fail("CopyToHost", "src", src == nullptr ? "null" : DescribeMemory(src, bytes));
    ok = false;
  }
  if (dst == nullptr || IsTracked(dst, 1)) {
    Fail("CopyToHost", "dst", dst == nullptr ? "null" : "is backend memory, not host memory");
    ok = false;
  }
  if (!ok) return absl::InvalidArgumentError("CopyToHost: bad pointers (see the failures)");
  Access access(state_);
  access.Open(src);
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

Status DeviceSimBackend::Synchronize() {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  Status s = std::exchange(status_, absl::OkStatus());
  Status inner = inner_->Synchronize();
  return s.ok() ? inner : s;
}

Status DeviceSimBackend::SetMathMode(kernels::MathMode mode) {
  state_->stats.math_modes.insert(mode);
  mode_ = mode;
  return absl::OkStatus();
}

Status DeviceSimBackend::SetDeterministic(bool deterministic) {
  state_->stats.deterministic_calls.push_back(deterministic);
  deterministic_ = deterministic;
  return absl::OkStatus();
}

void DeviceSimBackend::Fill(int64_t n, float value, float* p) {
  Check c(*this, "Fill");
  c.Arg(p, n, "p");
  if (c.ok()) inner_->Fill(n, value, p);
}

void DeviceSimBackend::Copy(int64_t outer, int64_t rows, int64_t cols, const float* src,
                            int64_t src_outer, int64_t src_row, float* dst, int64_t dst_outer,
                            int64_t dst_row, bool accumulate) {
  Check c(*this, "Copy");
  c.Arg(src, StridedExtent3(outer, src_outer, rows, src_row, cols), "src");
  c.Arg(dst, StridedExtent3(outer, dst_outer, rows, dst_row, cols), "dst");
  if (c.ok()) {
    inner_->Copy(outer, rows, cols, src, src_outer, src_row, dst, dst_outer, dst_row, accumulate);
  }
}

void DeviceSimBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float beta, float* c_, int64_t ldc) {
  Check c(*this, "Gemm");
  c.Arg(a, trans_a ? StridedExtent(k, lda, m) : StridedExtent(m, lda, k), "a");
  c.Arg(b, trans_b ? StridedExtent(n, ldb, k) : StridedExtent(k, ldb, n), "b");
  c.Arg(c_, StridedExtent(m, ldc, n), "c");
  if (c.ok()) inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c_, ldc);
}

void DeviceSimBackend::DenseForward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                                    const float* b, const float* slope, float* pre, float* y) {
  Check c(*this, "DenseForward");
  c.Arg(x, StridedExtent(d.rows, ldx, d.in), "x");
  c.Arg(w, int64_t{d.in} * d.out, "w");
  c.Arg(b, d.out, "b");
  if (d.act == kernels::Activation::kPrelu) c.Arg(slope, d.out, "slope");
  c.Arg(pre, d.rows * d.out, "pre");
  c.Arg(y, d.rows * d.out, "y");
  if (c.ok()) inner_->DenseForward(d, x, ldx, w, b, slope, pre, y);
}

void DeviceSimBackend::DenseBackward(const DenseDims& d, const float* x, int64_t ldx,
                                     const float* w, const float* slope, const float* pre,
                                     const float* y, const float* dy, float* dx, int64_t lddx,
                                     float* dw, float* db, float* dslope, float* workspace) {
  Check c(*this, "DenseBackward");
  const int64_t out = d.rows * d.out, wsize = int64_t{d.in} * d.out;
  const bool prelu = d.act == kernels::Activation::kPrelu;
  c.Arg(x, StridedExtent(d.rows, ldx, d.in), "x");
  c.Arg(w, wsize, "w");
  if (prelu) c.Arg(slope, d.out, "slope");
  c.Arg(pre, out, "pre");
  c.Arg(y, out, "y");
  c.Arg(dy, out, "dy");
  c.Arg(dx, StridedExtent(d.rows, lddx, d.in), "dx");
  c.Arg(dw, wsize, "dw");
  c.Arg(db, d.out, "db");
  if (prelu) c.Arg(dslope, d.out, "dslope");
  c.Arg(workspace, kernels::DenseWorkspaceFloats(d), "workspace");
  if (c.ok())
    inner_->DenseBackward(d, x, ldx, w, slope, pre, y, dy, dx, lddx, dw, db, dslope, workspace);
}

void DeviceSimBackend::GatherRows(int64_t n, int dim, const float* rows, const int32_t* inv,
                                  const float* mask, float* out, int64_t ld_out) {
  Check c(*this, "GatherRows");
  c.Arg(inv, n, "inv");
  // rows is [U, dim]; the op reads the rows inv names (inv is readable here once it is checked).
  int64_t num_rows = 0;
  const bool inv_ok = c.ok();
  for (int64_t i = 0; inv_ok && inv != nullptr && i < n; ++i) {
    num_rows = std::max<int64_t>(num_rows, int64_t{inv[i]} + 1);
  }
  c.Arg(rows, num_rows * dim, "rows");
  c.Arg(mask, n, "mask");
  c.Arg(out, StridedExtent(n, ld_out, dim), "out");
  if (c.ok()) inner_->GatherRows(n, dim, rows, inv, mask, out, ld_out);
}

void DeviceSimBackend::SegmentSumRows(int64_t n, int dim, const float* dout, int64_t ld_dout,
                                      const int32_t* inv, const float* mask, int64_t num_unique,
                                      float* drows) {
  Check c(*this, "SegmentSumRows");
  c.Arg(dout, StridedExtent(n, ld_dout, dim), "dout");
  c.Arg(inv, n, "inv");
  c.Arg(mask, n, "mask");
  c.Arg(drows, num_unique * dim, "drows");
  if (c.ok()) inner_->SegmentSumRows(n, dim, dout, ld_dout, inv, mask, num_unique, drows);
}

void DeviceSimBackend::DotAttentionForward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                           const float* k, const float* mask, float* alpha,
                                           float* out, int64_t ldout) {
  Check c(*this, "DotAttentionForward");
  c.Arg(q, StridedExtent(batch, ldq, d), "q");
  c.Arg(k, batch * n * d, "k");
  c.Arg(mask, batch * n, "mask");
  c.Arg(alpha, batch * n, "alpha");
  c.Arg(out, StridedExtent(batch, ldout, d), "out");
  if (c.ok()) inner_->DotAttentionForward(batch, n, d, q, ldq, k, mask, alpha, out, ldout);
}

void DeviceSimBackend::DotAttentionBackward(int64_t batch, int n, int d, const float* q,
                                            int64_t ldq, const float* k, const float* mask,
                                            const float* alpha, const float* dout, int64_t lddout,
                                            float* dq, int64_t lddq, float* dk) {
  Check c(*this, "DotAttentionBackward");
  c.Arg(q, StridedExtent(batch, ldq, d), "q");
  c.Arg(k, batch * n * d, "k");
  c.Arg(mask, batch * n, "mask");
  c.Arg(alpha, batch * n, "alpha");
  c.Arg(dout, StridedExtent(batch, lddout, d), "dout");
  c.Arg(dq, StridedExtent(batch, lddq, d), "dq");
  c.Arg(dk, batch * n * d, "dk");
  if (c.ok()) {
    inner_->DotAttentionBackward(batch, n, d, q, ldq, k, mask, alpha, dout, lddout, dq, lddq, dk);
  }
}

void DeviceSimBackend::TopKMask(int64_t batch, int n, int k, const float* alpha, float* rho) {
  Check c(*this, "TopKMask");
  c.Arg(alpha, batch * n, "alpha");
  c.Arg(rho, batch * n, "rho");
  if (c.ok()) inner_->TopKMask(batch, n, k, alpha, rho);
}

void DeviceSimBackend::DampedMeanForward(int64_t batch, int n, int d, const float* x,
                                         const float* rho, float* out, int64_t ldout) {
  Check c(*this, "DampedMeanForward");
  c.Arg(x, batch * n * d, "x");
  c.Arg(rho, batch * n, "rho");
  c.Arg(out, StridedExtent(batch, ldout, d), "out");
  if (c.ok()) inner_->DampedMeanForward(batch, n, d, x, rho, out, ldout);
}

void DeviceSimBackend::DampedMeanBackward(int64_t batch, int n, int d, const float* rho,
                                          const float* dout, int64_t lddout, float* dx) {
  Check c(*this, "DampedMeanBackward");
  c.Arg(rho, batch * n, "rho");
  c.Arg(dout, StridedExtent(batch, lddout, d), "dout");
  c.Arg(dx, batch * n * d, "dx");
  if (c.ok()) inner_->DampedMeanBackward(batch, n, d, rho, dout, lddout, dx);
}

void DeviceSimBackend::MaskedSoftmaxForward(int64_t rows, int n, const float* scores,
                                            const float* mask, float* p) {
  Check c(*this, "MaskedSoftmaxForward");
  c.Arg(scores, rows * n, "scores");
  c.Arg(mask, rows * n, "mask");
  c.Arg(p, rows * n, "p");
  if (c.ok()) inner_->MaskedSoftmaxForward(rows, n, scores, mask, p);
}

void DeviceSimBackend::MaskedSoftmaxBackward(int64_t rows, int n, const float* p, const float* mask,
                                             const float* dp, float* dscores) {
  Check c(*this, "MaskedSoftmaxBackward");
  c.Arg(p, rows * n, "p");
  c.Arg(mask, rows * n, "mask");
  c.Arg(dp, rows * n, "dp");
  c.Arg(dscores, rows * n, "dscores");
  if (c.ok()) inner_->MaskedSoftmaxBackward(rows, n, p, mask, dp, dscores);
}

void DeviceSimBackend::AttentionFeaturesForward(int64_t batch, int time, int hidden,
                                                const float* qp, const float* h, float* c_) {
  Check c(*this, "AttentionFeaturesForward");
  const int64_t bt = batch * time;
  c.Arg(qp, batch * hidden, "qp");
  c.Arg(h, bt * hidden, "h");
  c.Arg(c_, bt * 4 * hidden, "c");
  if (c.ok()) inner_->AttentionFeaturesForward(batch, time, hidden, qp, h, c_);
}

void DeviceSimBackend::AttentionFeaturesBackward(int64_t batch, int time, int hidden,
                                                 const float* qp, const float* h, const float* dc,
                                                 float* dqp, float* dh) {
  Check c(*this, "AttentionFeaturesBackward");
  const int64_t bt = batch * time;
  c.Arg(qp, batch * hidden, "qp");
  c.Arg(h, bt * hidden, "h");
  c.Arg(dc, bt * 4 * hidden, "dc");
  c.Arg(dqp, batch * hidden, "dqp");
  c.Arg(dh, bt * hidden, "dh");
  if (c.ok()) inner_->AttentionFeaturesBackward(batch, time, hidden, qp, h, dc, dqp, dh);
}

void DeviceSimBackend::FeatureDenseForward(const kernels::FeatureDenseDims& d, const float* qp,
                                           const float* h, const float* w, const float* b,
                                           const float* slope, float* pre, float* y,
                                           float* workspace) {
  Check c(*this, "FeatureDenseForward");
  const int64_t rows = d.batch * d.time, out = rows * d.out;
  c.Arg(qp, d.batch * d.hidden, "qp");
  c.Arg(h, rows * d.hidden, "h");
  c.Arg(w, 4 * int64_t{d.hidden} * d.out, "w");
  c.Arg(b, d.out, "b");
  if (d.act == kernels::Activation::kPrelu) c.Arg(slope, d.out, "slope");
  c.Arg(pre, out, "pre");
  c.Arg(y, out, "y");
  c.Arg(workspace, kernels::FeatureDenseWorkspaceFloats(d), "workspace");
  if (c.ok()) inner_->FeatureDenseForward(d, qp, h, w, b, slope, pre, y, workspace);
}

void DeviceSimBackend::FeatureDenseBackward(const kernels::FeatureDenseDims& d, const float* qp,
                                            const float* h, const float* w, const float* slope,
                                            const float* pre, const float* y, const float* dy,
                                            float* dqp, float* dh, float* dw, float* db,
                                            float* dslope, float* workspace) {
  Check c(*this, "FeatureDenseBackward");
  const int64_t rows = d.batch * d.time, out = rows * d.out;
  const bool prelu = d.act == kernels::Activation::kPrelu;
  c.Arg(qp, d.batch * d.hidden, "qp");
  c.Arg(h, rows * d.hidden, "h");
  c.Arg(w, 4 * int64_t{d.hidden} * d.out, "w");
  if (prelu) c.Arg(slope, d.out, "slope");
  c.Arg(pre, out, "pre");
  c.Arg(y, out, "y");
  c.Arg(dy, out, "dy");
  c.Arg(dqp, d.batch * d.hidden, "dqp");
  c.Arg(dh, rows * d.hidden, "dh");
  c.Arg(dw, 4 * int64_t{d.hidden} * d.out, "dw");
  c.Arg(db, d.out, "db");
  if (prelu) c.Arg(dslope, d.out, "dslope");
  c.Arg(workspace, kernels::FeatureDenseWorkspaceFloats(d), "workspace");
  if (c.ok()) {
    inner_->FeatureDenseBackward(d, qp, h, w, slope, pre, y, dy, dqp, dh, dw, db, dslope,
                                 workspace);
  }
}

void DeviceSimBackend::GruForward(const RnnDims& d, const float* x, const float* w_in,
                                  const float* w_rec, const float* b_in, const float* b_rec,
                                  float* h, float* cache, float* workspace) {
  Check c(*this, "GruForward");
  const int64_t bt = d.batch * d.time, H = d.hidden, G = 3 * H;
  c.Arg(x, bt * d.in, "x");
  c.Arg(w_in, d.in * G, "w_in");
  c.Arg(w_rec, H * G, "w_rec");
  c.Arg(b_in, G, "b_in");
  c.Arg(b_rec, G, "b_rec");
  c.Arg(h, bt * H, "h");
  c.Arg(cache, kernels::GruCacheFloats(d), "cache");
  c.Arg(workspace, kernels::GruWorkspaceFloats(d), "workspace");
  if (c.ok()) inner_->GruForward(d, x, w_in, w_rec, b_in, b_rec, h, cache, workspace);
}

void DeviceSimBackend::GruBackward(const RnnDims& d, const float* x, const float* w_in,
                                   const float* w_rec, const float* h, const float* cache,
                                   const float* dh, float* dx, float* dw_in, float* dw_rec,
                                   float* db_in, float* db_rec, float* workspace) {
  Check c(*this, "GruBackward");
  const int64_t bt = d.batch * d.time, H = d.hidden, G = 3 * H;
  c.Arg(x, bt * d.in, "x");
  c.Arg(w_in, d.in * G, "w_in");
  c.Arg(w_rec, H * G, "w_rec");
  c.Arg(h, bt * H, "h");
  c.Arg(cache, kernels::GruCacheFloats(d), "cache");
  c.Arg(dh, bt * H, "dh");
  c.Arg(dx, bt * d.in, "dx");
  c.Arg(dw_in, d.in * G, "dw_in");
  c.Arg(dw_rec, H * G, "dw_rec");
  c.Arg(db_in, G, "db_in");
  c.Arg(db_rec, G, "db_rec");
  c.Arg(workspace, kernels::GruWorkspaceFloats(d), "workspace");
  if (c.ok()) {
    inner_->GruBackward(d, x, w_in, w_rec, h, cache, dh, dx, dw_in, dw_rec, db_in, db_rec,
                        workspace);
  }
}

void DeviceSimBackend::AugruForward(const RnnDims& d, const float* x, const float* att,
                                    const float* g_w, const float* g_b, const float* c_w,
                                    const float* c_b, float* hs, float* cache, float* workspace) {
  Check c(*this, "AugruForward");
  const int64_t bt = d.batch * d.time, H = d.hidden, K = d.in + H;
  c.Arg(x, bt * d.in, "x");
  c.Arg(att, bt, "att");
  c.Arg(g_w, K * 2 * H, "g_w");
  c.Arg(g_b, 2 * H, "g_b");
  c.Arg(c_w, K * H, "c_w");
  c.Arg(c_b, H, "c_b");
  c.Arg(hs, bt * H, "hs");
  c.Arg(cache, kernels::AugruCacheFloats(d), "cache");
  c.Arg(workspace, kernels::AugruWorkspaceFloats(d), "workspace");
  if (c.ok()) inner_->AugruForward(d, x, att, g_w, g_b, c_w, c_b, hs, cache, workspace);
}

void DeviceSimBackend::AugruBackward(const RnnDims& d, const float* x, const float* att,
                                     const float* g_w, const float* c_w, const float* hs,
                                     const float* cache, const float* dlast, float* dx, float* datt,
                                     float* dg_w, float* dg_b, float* dc_w, float* dc_b,
                                     float* workspace) {
  Check c(*this, "AugruBackward");
  const int64_t bt = d.batch * d.time, H = d.hidden, K = d.in + H;
  c.Arg(x, bt * d.in, "x");
  c.Arg(att, bt, "att");
  c.Arg(g_w, K * 2 * H, "g_w");
  c.Arg(c_w, K * H, "c_w");
  c.Arg(hs, bt * H, "hs");
  c.Arg(cache, kernels::AugruCacheFloats(d), "cache");
  c.Arg(dlast, d.batch * H, "dlast");
  c.Arg(dx, bt * d.in, "dx");
  c.Arg(datt, bt, "datt");
  c.Arg(dg_w, K * 2 * H, "dg_w");
  c.Arg(dg_b, 2 * H, "dg_b");
  c.Arg(dc_w, K * H, "dc_w");
  c.Arg(dc_b, H, "dc_b");
  c.Arg(workspace, kernels::AugruWorkspaceFloats(d), "workspace");
  if (c.ok()) {
    inner_->AugruBackward(d, x, att, g_w, c_w, hs, cache, dlast, dx, datt, dg_w, dg_b, dc_w, dc_b,
                          workspace);
  }
}

double DeviceSimBackend::BceWithLogits(int64_t n, const float* logits, const float* labels,
                                       float scale, float* dlogits) {
  Check c(*this, "BceWithLogits");
  c.Arg(logits, n, "logits");
  c.Arg(labels, n, "labels");
  c.Arg(dlogits, n, "dlogits");
  if (!c.ok()) return std::numeric_limits<double>::quiet_NaN();
  const double loss = inner_->BceWithLogits(n, logits, labels, scale, dlogits);
  if (dlogits == nullptr && overflow_loss_.count(++loss_calls_) > 0) {
    return std::numeric_limits<double>::infinity();
  }
  return loss;
}

double DeviceSimBackend::AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits,
                                 const float* mask, float scale, float* dpos, float* dneg) {
  Check c(*this, "AuxLoss");
  c.Arg(pos_logits, n, "pos_logits");
  c.Arg(neg_logits, n, "neg_logits");
  c.Arg(mask, n, "mask");
  c.Arg(dpos, n, "dpos");
  c.Arg(dneg, n, "dneg");
  if (!c.ok()) return std::numeric_limits<double>::quiet_NaN();
  return inner_->AuxLoss(n, pos_logits, neg_logits, mask, scale, dpos, dneg);
}

void DeviceSimBackend::AdamUpdate(int64_t n, const AdamHyper& h, int64_t t, const float* grad,
                                  float* param, float* m, float* v) {
  Check c(*this, "AdamUpdate");
  c.Arg(grad, n, "grad");
  c.Arg(param, n, "param");
  c.Arg(m, n, "m");
  c.Arg(v, n, "v");
  if (c.ok()) inner_->AdamUpdate(n, h, t, grad, param, m, v);
}

void DeviceSimBackend::Scale(int64_t n, float alpha, float* p) {
  Check c(*this, "Scale");
  state_->stats.scale_alphas.push_back(alpha);
  c.Arg(p, n, "p");
  if (c.ok()) inner_->Scale(n, alpha, p);
}

bool DeviceSimBackend::AllFinite(int64_t n, const float* p) {
  Check c(*this, "AllFinite");
  c.Arg(p, n, "p");
  const int64_t call = ++state_->stats.all_finite_calls;
  if (!c.ok()) return false;
  const bool finite = inner_->AllFinite(n, p);
  return finite && fail_all_finite_.count(call) == 0;
}

std::unique_ptr<DeviceSimBackend> CreateDeviceSimBackend(int threads, bool protect) {
  return std::make_unique<DeviceSimBackend>(kernels::CreateCpuBackend(threads), protect);
}

}  // namespace sift::testing
