#include "kernels/cuda/cuda_copy_channel.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace sift::cuda {

StatusOr<kernels::Fence> RecordCudaFence(cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  SIFT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  std::shared_ptr<void> handle(static_cast<void*>(event), [](void* e) {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
  });
  SIFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream));
  return kernels::Fence(std::move(handle));
}

Status WaitCudaFence(cudaStream_t stream, const kernels::Fence& fence) {
  if (fence.trivial()) return absl::OkStatus();
  SIFT_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(fence.handle()), 0));
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<CudaCopyChannel>> CudaCopyChannel::Create(int device,
                                                                   int64_t staging_bytes) {
  if (staging_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaCopyChannel: negative staging size ", staging_bytes));
  }
  std::unique_ptr<CudaCopyChannel> channel(new CudaCopyChannel(device));
  SIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  SIFT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&channel->stream_, cudaStreamNonBlocking));
  if (staging_bytes > 0) SIFT_RETURN_IF_ERROR(channel->Grow(staging_bytes));
  return channel;
}

CudaCopyChannel::~CudaCopyChannel() {
  if (stream_ != nullptr) {
    (void)cudaSetDevice(device_);
    (void)cudaStreamSynchronize(stream_);  // the staging is read until the copies are done
    (void)cudaStreamDestroy(stream_);
  }
  for (char* b : retired_) (void)cudaFreeHost(b);
  if (block_ != nullptr) (void)cudaFreeHost(block_);
}

Status CudaCopyChannel::Fail(Status s) {
  error_.Update(s);
  return s;
}

Status CudaCopyChannel::Grow(int64_t min_bytes) {
  const int64_t bytes = std::max(min_bytes, 2 * capacity_);
  void* p = nullptr;
  SIFT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, static_cast<size_t>(bytes)));
  if (block_ != nullptr) retired_.push_back(block_);
  block_ = static_cast<char*>(p);
  capacity_ = bytes;
  used_ = 0;
  return absl::OkStatus();
}

StatusOr<char*> CudaCopyChannel::Reserve(int64_t bytes) {
  constexpr int64_t kAlign = 256;
  int64_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
  if (block_ == nullptr || offset + bytes > capacity_) {
    SIFT_RETURN_IF_ERROR(Grow(bytes));
    offset = 0;
  }
  used_ = offset + bytes;
  return block_ + offset;
}

StatusOr<char*> CudaCopyChannel::BeginCopy(const char* op, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CudaCopyChannel::", op, ": negative size"));
  }
  SIFT_RETURN_IF_ERROR(error_);
  if (bytes == 0) return nullptr;
  SIFT_RETURN_IF_ERROR(Fail(SIFT_CUDA_STATUS(cudaSetDevice(device_))));
  StatusOr<char*> staged = Reserve(bytes);
  if (!staged.ok()) return Fail(staged.status());
  return staged;
}

Status CudaCopyChannel::Upload(const void* src, void* dst, int64_t bytes) {
  SIFT_ASSIGN_OR_RETURN(char* staged, BeginCopy("Upload", bytes));
  if (staged == nullptr) return absl::OkStatus();
  std::memcpy(staged, src, static_cast<size_t>(bytes));
  return Fail(SIFT_CUDA_STATUS(
      cudaMemcpyAsync(dst, staged, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_)));
}

Status CudaCopyChannel::Download(const void* src, void* dst, int64_t bytes) {
  SIFT_ASSIGN_OR_RETURN(char* staged, BeginCopy("Download", bytes));
  if (staged == nullptr) return absl::OkStatus();
  SIFT_RETURN_IF_ERROR(Fail(SIFT_CUDA_STATUS(
      cudaMemcpyAsync(staged, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_))));
  downloads_.push_back({staged, dst, bytes});
  return absl::OkStatus();
}

StatusOr<kernels::Fence> CudaCopyChannel::RecordFence() {
  SIFT_RETURN_IF_ERROR(error_);
  SIFT_RETURN_IF_ERROR(Fail(SIFT_CUDA_STATUS(cudaSetDevice(device_))));
  StatusOr<kernels::Fence> fence = RecordCudaFence(stream_);
  if (!fence.ok()) return Fail(fence.status());
  return fence;
}

Status CudaCopyChannel::WaitFence(const kernels::Fence& fence) {
  SIFT_RETURN_IF_ERROR(error_);
  SIFT_RETURN_IF_ERROR(Fail(SIFT_CUDA_STATUS(cudaSetDevice(device_))));
  return Fail(WaitCudaFence(stream_, fence));
}

Status CudaCopyChannel::Synchronize() {
  Status s = SIFT_CUDA_STATUS(cudaSetDevice(device_));
  if (s.ok()) s = SIFT_CUDA_STATUS(cudaStreamSynchronize(stream_));
  if (s.ok() && error_.ok()) {
    for (const PendingDownload& d : downloads_) {
      std::memcpy(d.dst, d.staged, static_cast<size_t>(d.bytes));
    }
  }
  downloads_.clear();
  if (s.ok()) {
    for (char* b : retired_) (void)cudaFreeHost(b);
    retired_.clear();
    used_ = 0;
  }
  Status result = error_;
  result.Update(s);
  error_ = absl::OkStatus();
  return result;
}

}  // namespace sift::cuda
