#include "worker/collectives.h"

#include "absl/strings/str_cat.h"

namespace sift::worker {

Collectives::~Collectives() = default;

Status Collectives::AllreduceAverage(absl::Span<float> data) {
  SIFT_RETURN_IF_ERROR(AllreduceSum(data));
  const float world = static_cast<float>(world_size());
  // Division (correctly rounded) rather than a multiply by 1/world: exact whenever the sum is
  // a multiple of world, and the same on every rank since every rank holds the same sum.
  for (float& v : data) v /= world;
  return absl::OkStatus();
}

Status ValidateRankAndWorld(int rank, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("collectives: world size must be >= 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("collectives: rank ", rank, " is outside [0, ", world_size, ")"));
  }
  return absl::OkStatus();
}

namespace {

class LocalCollectives : public Collectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status AllreduceSum(absl::Span<float> /*data*/) override { return absl::OkStatus(); }
  Status Broadcast(absl::Span<float> /*data*/, int root) override {
    if (root != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast: root ", root, " is outside [0, 1)"));
    }
    return absl::OkStatus();
  }
  Status Barrier() override { return absl::OkStatus(); }
};

}  // namespace

std::unique_ptr<Collectives> CreateLocalCollectives() {
  return std::make_unique<LocalCollectives>();
}

}  // namespace sift::worker
