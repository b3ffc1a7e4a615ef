#include "worker/nccl_collectives.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "worker/nccl_divide.h"
#include "worker/nccl_support.h"

namespace sift::worker {

static_assert(NCCL_UNIQUE_ID_BYTES == kNcclUniqueIdBytes, "nccl.h's unique id size changed");
static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);

namespace {

// `status` with NCCL's description of the communicator's last error appended, when it has one.
Status WithNcclDetail(Status status, ncclComm_t comm) {
  if (status.ok()) return status;
  const char* detail = ncclGetLastError(comm);
  if (detail == nullptr || *detail == '\0') return status;
  return Status(status.code(), absl::StrCat(status.message(), "; NCCL: ", detail));
}

// One poll of a non-blocking communicator: true when no NCCL call of it is in progress, false
// while one is, the asynchronous error (a peer or the network failed, ...) when there is one.
StatusOr<bool> PollCommunicator(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  SIFT_RETURN_IF_ERROR(WithNcclDetail(SIFT_CUDA_STATUS(ncclCommGetAsyncError(comm, &state)), comm));
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) {
    return WithNcclDetail(
        cuda::CudaCallStatus(state, "asynchronous communicator error (ncclCommGetAsyncError)",
                             __FILE__, __LINE__),
        comm);
  }
  return true;
}

// ncclCommAbort (safe while calls are in progress; unblocks hung kernels); `*comm` is gone after.
Status AbortCommunicator(ncclComm_t* comm) {
  if (*comm == nullptr) return absl::OkStatus();
  const ncclComm_t c = *comm;
  *comm = nullptr;
  return SIFT_CUDA_STATUS(ncclCommAbort(c));
}

// A NCCL call's result as a Status; ncclInProgress is success here (non-blocking mode: the
// watchdog polls for its completion).
Status EnqueueStatus(ncclResult_t result, ncclComm_t comm, const char* call, const char* file,
                     int line) {
  if (result == ncclInProgress) return absl::OkStatus();
  return WithNcclDetail(cuda::CudaCallStatus(result, call, file, line), comm);
}
#define SIFT_NCCL_ENQUEUE(comm, call) EnqueueStatus((call), (comm), #call, __FILE__, __LINE__)

WatchdogOptions MakeWatchdogOptions(double timeout_s) {
  WatchdogOptions options;
  options.timeout = absl::Seconds(timeout_s);
  return options;
}

class NcclCollectives : public Collectives {
 public:
  NcclCollectives(int rank, int world, std::string prefix, const NcclOptions& options,
                  ncclComm_t comm)
      : rank_(rank),
        world_(world),
        prefix_(std::move(prefix)),
        options_(options),
        stream_(static_cast<cudaStream_t>(options.stream)),
        watchdog_(MakeWatchdogOptions(options.timeout_s)),
        comm_(comm) {}

  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  ~NcclCollectives() override {
    // Errors here have nowhere to go: the communicator is finalized (bounded by the watchdog,
    // aborted when that fails) and the device resources are released regardless.
    (void)cudaSetDevice(options_.device);
    if (comm_ != nullptr) {
      const ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        const Status st = WaitWithWatchdog(
            Describe("finalize"), watchdog_, [this] { return PollCommunicator(comm_); },
            [this] { return AbortCommunicator(&comm_); }, *RealWatchdogClock());
        if (st.ok() && comm_ != nullptr) (void)ncclCommDestroy(comm_);
        comm_ = nullptr;
      } else {
        (void)AbortCommunicator(&comm_);
      }
    }
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    if (scratch_ != nullptr) (void)cudaFree(scratch_);
  }

  // The instance's device resources: the completion event and a small zeroed scratch buffer
  // (the size check's two int64 counts at offset 0; the barrier's float after them).
  Status AllocateResources() {
    const std::string op = Describe("setup");
    Status st = SIFT_CUDA_STATUS(cudaSetDevice(options_.device));
    if (st.ok()) st = SIFT_CUDA_STATUS(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    if (st.ok()) st = SIFT_CUDA_STATUS(cudaMalloc(&scratch_, kScratchBytes));
    if (st.ok()) st = SIFT_CUDA_STATUS(cudaMemset(scratch_, 0, kScratchBytes));
    return Annotate(st, op);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  bool device_memory() const override { return true; }
  Status UseStream(void* stream) override {
    if (stream == nullptr) {  // always honoured: the bound stream may be about to go
      stream_ = static_cast<cudaStream_t>(options_.stream);
      return absl::OkStatus();
    }
    SIFT_RETURN_IF_ERROR(CheckAlive(Describe("bind stream")));
    stream_ = static_cast<cudaStream_t>(stream);
    return absl::OkStatus();
  }

  Status AllreduceSum(absl::Span<float> data) override {
    const std::string op = Describe("allreduce", data.size());
    SIFT_RETURN_IF_ERROR(CheckAlive(op));
    SIFT_RETURN_IF_ERROR(CheckSizes(op, data.size()));
    if (data.empty()) return absl::OkStatus();
    return Run(op, [&] {
      return SIFT_NCCL_ENQUEUE(comm_, ncclAllReduce(data.data(), data.data(), data.size(),
                                                    ncclFloat32, ncclSum, comm_, stream_));
    });
  }

  Status AllreduceAverage(absl::Span<float> data) override {
    SIFT_RETURN_IF_ERROR(AllreduceSum(data));
    if (data.empty() || world_ == 1) return absl::OkStatus();  // x / 1 == x
    return Run(Describe("allreduce average: divide by the world size", data.size()), [&] {
      return cuda::CudaCallStatus(
          LaunchDivideInPlace(stream_, data.data(), static_cast<int64_t>(data.size()),
                              static_cast<float>(world_)),
          "LaunchDivideInPlace", __FILE__, __LINE__);
    });
  }

  Status Broadcast(absl::Span<float> data, int root) override {
    if (root < 0 || root >= world_) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast: root ", root, " is outside [0, ", world_, ")"));
    }
    const std::string op = Describe(rank_ == root ? std::string("broadcast, the root")
                                                  : absl::StrCat("broadcast from root ", root),
                                    data.size());
    SIFT_RETURN_IF_ERROR(CheckAlive(op));
    SIFT_RETURN_IF_ERROR(CheckSizes(op, data.size()));
    if (data.empty()) return absl::OkStatus();
    return Run(op, [&] {
      return SIFT_NCCL_ENQUEUE(comm_, ncclBroadcast(data.data(), data.data(), data.size(),
                                                    ncclFloat32, root, comm_, stream_));
    });
  }

  Status Barrier() override {
    const std::string op = Describe("barrier");
    SIFT_RETURN_IF_ERROR(CheckAlive(op));
    float* flag = reinterpret_cast<float*>(static_cast<char*>(scratch_) + kBarrierOffset);
    return Run(op, [&] {
      return SIFT_NCCL_ENQUEUE(comm_,
                               ncclAllReduce(flag, flag, 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }

 private:
  static constexpr size_t kBarrierOffset = 2 * sizeof(int64_t);
  static constexpr size_t kScratchBytes = kBarrierOffset + sizeof(float);

  std::string Describe(absl::string_view what) const {
    return absl::StrCat("nccl ", what, " (rank ", rank_, " of ", world_, ", prefix '", prefix_,
                        "', device ", options_.device, ")");
  }
  std::string Describe(absl::string_view what, size_t n) const {
    return absl::StrCat("nccl ", what, " (rank ", rank_, " of ", world_, ", prefix '", prefix_,
                        "', device ", options_.device, ", ", n, " floats)");
  }

  Status CheckAlive(const std::string& op) const {
    if (broken_.ok()) return absl::OkStatus();
    return Status(broken_.code(),
                  absl::StrCat(op, ": the communicator failed earlier and must be recreated: ",
                               broken_.message()));
  }

  // Runs `enqueue` (NCCL calls or a kernel launch on stream_), then waits under the watchdog
  // until NCCL has finished enqueueing (non-blocking mode) and the stream has executed the work
  // (an event recorded after it). Any failure or timeout aborts the communicator and kills the
  // instance.
  Status Run(const std::string& op, absl::FunctionRef<Status()> enqueue) {
    Status st = SIFT_CUDA_STATUS(cudaSetDevice(options_.device));
    if (st.ok()) st = enqueue();
    if (!st.ok()) {
      st = Annotate(st, op);
    } else {
      bool recorded = false;
      auto poll = [&]() -> StatusOr<bool> {
        SIFT_ASSIGN_OR_RETURN(const bool idle, PollCommunicator(comm_));
        if (!idle) return false;  // still enqueueing: no other work on the stream until done
        if (!recorded) {
          SIFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream_));
          recorded = true;
        }
        const cudaError_t e = cudaEventQuery(event_);
        if (e == cudaErrorNotReady) {
          (void)cudaGetLastError();  // not an error: keep the thread's last error clean
          return false;
        }
        SIFT_CUDA_RETURN_IF_ERROR(e);
        return true;
      };
      st = WaitWithWatchdog(
          op, watchdog_, poll, [this] { return AbortCommunicator(&comm_); }, *RealWatchdogClock());
    }
    if (!st.ok()) {
      broken_ = st;
      (void)AbortCommunicator(&comm_);  // peers fail at once instead of at their timeout
    }
    return st;
  }

  // All ranks allreduce {n, -n} with max: a[0] is the largest count, -a[1] the smallest.
  Status CheckSizes(const std::string& op, size_t n) {
    if (!options_.check_sizes) return absl::OkStatus();
    int64_t sizes[2] = {static_cast<int64_t>(n), -static_cast<int64_t>(n)};
    const std::string check = op + " size check";
    SIFT_RETURN_IF_ERROR(Run(check, [&]() -> Status {
      // Pageable source: staged before cudaMemcpyAsync returns, so `sizes` may change after.
      SIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(scratch_, sizes, sizeof(sizes), cudaMemcpyHostToDevice, stream_));
      return SIFT_NCCL_ENQUEUE(
          comm_, ncclAllReduce(scratch_, scratch_, 2, ncclInt64, ncclMax, comm_, stream_));
    }));
    SIFT_RETURN_IF_ERROR(Run(check, [&]() -> Status {
      return SIFT_CUDA_STATUS(
          cudaMemcpyAsync(sizes, scratch_, sizeof(sizes), cudaMemcpyDeviceToHost, stream_));
    }));
    if (sizes[0] != -sizes[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": element counts differ across ranks (min ", -sizes[1], ", max ",
                       sizes[0], ", this rank ", n, ")"));
    }
    return absl::OkStatus();
  }

  const int rank_;
  const int world_;
  const std::string prefix_;
  const NcclOptions options_;
  cudaStream_t stream_;  // options_.stream, or the one UseStream bound
  const WatchdogOptions watchdog_;
  ncclComm_t comm_ = nullptr;  // null once aborted
  cudaEvent_t event_ = nullptr;
  void* scratch_ = nullptr;
  Status broken_;
};

// The communicator's id: rank 0 creates and publishes it, the others wait for it.
StatusOr<ncclUniqueId> RendezvousId(KvStore* store, const std::string& key, int rank,
                                    absl::Duration timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    SIFT_CUDA_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal);
    SIFT_RETURN_IF_ERROR(
        store->Set(key, EncodeNcclUniqueId(absl::MakeConstSpan(bytes, kNcclUniqueIdBytes))));
    return id;
  }
  SIFT_ASSIGN_OR_RETURN(const std::string text, store->Get(key, timeout));
  SIFT_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, DecodeNcclUniqueId(text, key));
  std::memcpy(id.internal, bytes.data(), kNcclUniqueIdBytes);
  return id;
}

}  // namespace

StatusOr<std::unique_ptr<Collectives>> CreateNcclCollectives(KvStore* store,
                                                             const std::string& prefix, int rank,
                                                             int world_size,
                                                             const NcclOptions& options) {
  SIFT_RETURN_IF_ERROR(ValidateRankAndWorld(rank, world_size));
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: timeout_s must be a positive number, got ", options.timeout_s));
  }
  if (options.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: device must be >= 0, got ", options.device));
  }
  if (store == nullptr) return absl::InvalidArgumentError("nccl: no rendezvous store");
  if (prefix.empty()) return absl::InvalidArgumentError("nccl: empty rendezvous prefix");
  const std::string op = absl::StrCat("nccl init (rank ", rank, " of ", world_size, ", prefix '",
                                      prefix, "', device ", options.device, ")");
  const absl::Duration timeout = absl::Seconds(options.timeout_s);

  StatusOr<ncclUniqueId> id = RendezvousId(store, prefix + "/nccl_id", rank, timeout);
  if (!id.ok()) return Annotate(id.status(), op);

  // The device must be current before init (one rank per GPU).
  SIFT_RETURN_IF_ERROR(Annotate(SIFT_CUDA_STATUS(cudaSetDevice(options.device)), op));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  Status st =
      SIFT_NCCL_ENQUEUE(comm, ncclCommInitRankConfig(&comm, world_size, *id, rank, &config));
  if (st.ok() && comm == nullptr) {
    st = absl::InternalError("ncclCommInitRankConfig returned no communicator");
  }
  if (st.ok()) {
    st = WaitWithWatchdog(
        op, MakeWatchdogOptions(options.timeout_s), [&] { return PollCommunicator(comm); },
        [&] { return AbortCommunicator(&comm); }, *RealWatchdogClock());
  } else {
    st = Annotate(st, op);
  }
  if (!st.ok()) {
    (void)AbortCommunicator(&comm);
    return st;
  }
  auto collectives = std::make_unique<NcclCollectives>(rank, world_size, prefix, options, comm);
  SIFT_RETURN_IF_ERROR(collectives->AllocateResources());
  return std::unique_ptr<Collectives>(std::move(collectives));
}

}  // namespace sift::worker
