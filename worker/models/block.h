// What every model block of worker/models/ is made of: a buffer of backend memory (Buf), the plan
// that records buffer sizes while a model is put together and allocates them all at once
// (BufferPlan), and the pass a block computes in (Pass). A block (dien_block.h, esu_block.h,
// soft_gsu_block.h, din_block.h; the MLP heads in layers.h) registers its parameters in the
// model's flat layout, plans its activations, and runs its forward and backward over the op API
// (kernels/backend.h) on the pass's parameters, gradients and workspace. Blocks own only their
// parameters' offsets and their activations; the inputs they read (the gathered embeddings, the
// masks) and the gradients they add into belong to the model that composes them.
// Internal to sift_worker; plain objects owned by one Model; not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/backend.h"

namespace sift::worker::models {

// One block of backend memory: floats, or int32 (the staged inverses and time buckets; both are
// 4 bytes, so a plan's float count is the element count).
struct Buf {
  kernels::BackendBuffer mem;
  float* data() const { return mem.floats(); }
  const int32_t* ints() const { return static_cast<const int32_t*>(mem.data()); }
  bool empty() const { return mem.empty(); }
};

// Buffers recorded with their sizes (Add), allocated in the backend's memory by Allocate, in the
// order recorded. REQUIRES: every Buf outlives the plan's Allocate.
class BufferPlan {
 public:
  void Add(Buf* buf, int64_t floats) {
    pending_.push_back({buf, std::max<int64_t>(floats, 0) * int64_t{sizeof(float)}});
  }
  Status Allocate(kernels::Backend* be) {
    for (const Pending& p : pending_) {
      SIFT_ASSIGN_OR_RETURN(p.buf->mem, be->Allocate(p.bytes));
    }
    pending_.clear();
    return absl::OkStatus();
  }

 private:
  struct Pending {
    Buf* buf;
    int64_t bytes;
  };
  std::vector<Pending> pending_;
};

// One forward or backward pass of a model: its backend, the flat parameters and gradients (the
// model's layout; grads null in a forward pass), the shared workspace (at least the largest
// WorkspaceFloats() of the model's blocks) and the batch's rows.
struct Pass {
  kernels::Backend* be = nullptr;
  const float* params = nullptr;
  float* grads = nullptr;
  float* workspace = nullptr;
  int64_t batch = 0;
};

// The long slots of samples [b0, b0 + c) of SIM's search, as one chunk: each sample's slots
// [start, start + width) of its T_L (the chunk's window; outside it every slot of these samples
// is padding, so skipping it changes no result), resident as [c, width] arrays. `offset` is the
// chunk's place in the batch's ragged per-slot arrays (the attention weights, the top-k mask):
// the sum of c * width over the chunks before it. A pass over the whole batch is one chunk with
// b0 0, c B, start 0, width T_L, offset 0.
struct SlotChunk {
  int64_t b0 = 0, c = 0;
  int start = 0, width = 0;
  int64_t offset = 0;
  const float* mask = nullptr;    // [c, width]: the slots' mask (backend memory)
  const int32_t* time = nullptr;  // [c, width]: their time buckets (the time embedding; else null)
  int64_t slots() const { return c * width; }
};

}  // namespace sift::worker::models
