// Collectives over NCCL on the GPU (worker/collectives.h): spans are DEVICE pointers
// (device_memory() is true) and every collective runs on NcclOptions::stream, or the stream bound
// later with UseStream: the trainer binds the CUDA backend's compute stream, so an allreduce
// follows the backward pass on the device without a separate Synchronize first; each call still
// returns once its collective completed (the watchdog's wait then covers the work queued before
// it, and the size check's small host copies wait for that stream too).
// Rendezvous through a sift::KvStore: rank 0 calls ncclGetUniqueId and publishes the id, hex
// encoded, under "<prefix>/nccl_id"; the other ranks Get it. The communicator is created
// non-blocking and every step (init, each collective, shutdown) is waited for by a watchdog
// (worker/nccl_support.h) that calls ncclCommAbort on a timeout or an asynchronous error (a peer
// lost): a silent peer surfaces as DEADLINE_EXCEEDED after timeout_s, never as a hang. After an
// error the instance is dead (collectives.h). Not thread-safe: one thread issues all calls.
// Defined only in builds with CUDA and NCCL: sift_worker then defines
// SIFT_HAVE_NCCL_COLLECTIVES=1 (worker/CMakeLists.txt); callers guard their use with it.
//
// Determinism: AllreduceSum is ncclAllReduce(ncclSum, float). NCCL's reduction order depends on
// the world size, the topology (ring/tree choice, channels, protocol) and the NCCL version, not
// on the data or the run, so results are bit-identical across runs for a fixed world size,
// topology and NCCL version, and identical on every rank (they all receive the same reduced
// values); they are NOT bit-identical to the Gloo path or across NCCL versions or machines.
// AllreduceAverage = AllreduceSum, then a kernel divides each element by world_size()
// (correctly rounded division, as the host default), rather than ncclAvg, whose float
// implementation pre-multiplies each rank's input by 1/world before summing (a different
// rounding than "sum, then divide" that the interface promises).
#pragma once

#include <memory>
#include <string>

#include "common/kv_store.h"
#include "worker/collectives.h"

namespace sift::worker {

struct NcclOptions {
  // The CUDA device of this rank (one rank per GPU). Creation makes it the calling thread's
  // current device (cudaSetDevice), and every call sets it again. The worker uses device 0 of its
  // CUDA_VISIBLE_DEVICES, as the cuda backend does: several workers on one multi-GPU host need
  // one visible GPU each (the Kubernetes and Slurm manifests give each worker its own).
  int device = 0;
  // A cudaStream_t on `device`, owned by the caller (nullptr: the legacy default stream, what the
  // worker uses). Collectives are enqueued on it after the work already there, and each call
  // returns once its collective has completed on the device.
  void* stream = nullptr;
  // Bound on the id rendezvous, on communicator init, and on each collective and the shutdown.
  double timeout_s = 60;
  // Before each allreduce/broadcast, a tiny allreduce (max over {n, -n}) compares the element
  // counts of all ranks and fails every rank with INVALID_ARGUMENT on a mismatch (instead of a
  // hang or garbage). Costs one extra small collective per call.
  bool check_sizes = true;
};

// Creates rank `rank` of a `world_size`-rank communicator (world_size 1 included: a one-rank
// NCCL communicator, so that spans stay device memory). `store` must outlive the call only;
// `prefix` must be fresh for every rendezvous ("<job>/<generation>"): a NCCL id is never reused.
// Errors: INVALID_ARGUMENT for a bad rank/world/timeout/prefix/store, or a malformed published
// id; DEADLINE_EXCEEDED (naming the rank, world and prefix) when the id or the peers do not
// arrive within timeout_s; CUDA/NCCL failures as kernels/cuda/cuda_status.h maps them.
StatusOr<std::unique_ptr<Collectives>> CreateNcclCollectives(KvStore* store,
                                                             const std::string& prefix, int rank,
                                                             int world_size,
                                                             const NcclOptions& options);

}  // namespace sift::worker
