// Collectives between the workers of one job: dense-gradient allreduce, parameter broadcast and
// barriers, behind one interface (Gloo over TCP: worker/gloo_collectives.h; NCCL on GPUs:
// worker/nccl_collectives.h).
// Every rank must issue the same collectives, in the same order, with the same sizes. An instance
// is not thread-safe (serialize calls). After an error the instance is dead: every later call
// returns that error; recover by creating a new one under a new rendezvous prefix.
#pragma once

#include <memory>

#include "absl/types/span.h"
#include "common/status.h"

namespace sift::worker {

class Collectives {
 public:
  virtual ~Collectives();
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In place: every rank ends with the elementwise sum over ranks. Deterministic: the same inputs
  // give bit-identical results on every rank and on every run (for a fixed world size).
  virtual Status AllreduceSum(absl::Span<float> data) = 0;
  // AllreduceSum, then each element divided by world_size() (same determinism).
  virtual Status AllreduceAverage(absl::Span<float> data);
  // In place: every rank ends with `root`'s data. INVALID_ARGUMENT when root is outside
  // [0, world_size()).
  virtual Status Broadcast(absl::Span<float> data, int root) = 0;
  // Returns once every rank has entered the barrier.
  virtual Status Barrier() = 0;
  // Whether the spans are device memory (NCCL: the CUDA backend's buffers) rather than host
  // memory (Gloo, local). The trainer stages device buffers through the host for host collectives.
  virtual bool device_memory() const { return false; }
  // Device collectives: enqueue on `stream` from now on (a cudaStream_t on the collectives'
  // device, e.g. the CUDA backend's compute stream: Backend::native_stream()), so each collective
  // follows the work already on that stream without a separate host synchronize; calls still
  // return once their collective completed. nullptr restores the collectives' own default. Host
  // collectives: no effect. REQUIRES: the stream outlives its use (bind nullptr before destroying
  // it).
  virtual Status UseStream(void* stream) {
    (void)stream;
    return absl::OkStatus();
  }
};

// world_size 1 (single-worker runs): rank 0, every collective leaves the data as it is.
std::unique_ptr<Collectives> CreateLocalCollectives();

// INVALID_ARGUMENT unless world_size >= 1 and 0 <= rank < world_size.
Status ValidateRankAndWorld(int rank, int world_size);

}  // namespace sift::worker
