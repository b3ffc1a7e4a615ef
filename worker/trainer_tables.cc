#include "worker/trainer_tables.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sift::worker {
namespace {

// The tables in this process: one EmbeddingStore, pulled and pushed table by table.
class InProcessTables final : public TrainerTables {
 public:
  InProcessTables(std::unique_ptr<embedding::EmbeddingStore> store, std::vector<size_t> dims)
      : store_(std::move(store)), dims_(std::move(dims)) {}

  Status Fetch(bool train, BatchKeys* keys, const std::function<Status(int)>& arrived) override {
    SIFT_RETURN_IF_ERROR(CheckTables(keys->tables.size()));
    for (size_t tb = 0; tb < keys->tables.size(); ++tb) {
      TableKeys& tk = keys->tables[tb];
      const absl::Span<float> out = absl::MakeSpan(tk.rows.data(), tk.keys.size() * dims_[tb]);
      const uint32_t table = static_cast<uint32_t>(tb);
      SIFT_RETURN_IF_ERROR(train ? store_->Pull(table, tk.keys, out)
                                 : store_->Lookup(table, tk.keys, out));
      // This table's rows travel (Model::UploadRows) while the next table is pulled.
      SIFT_RETURN_IF_ERROR(arrived(static_cast<int>(tb)));
    }
    return absl::OkStatus();
  }

  Status Push(const BatchKeys& keys, int64_t global_step, float lr_multiplier) override {
    SIFT_RETURN_IF_ERROR(CheckTables(keys.tables.size()));
    for (size_t tb = 0; tb < keys.tables.size(); ++tb) {
      const TableKeys& tk = keys.tables[tb];
      const absl::Span<const float> grads(tk.grads.data(), tk.keys.size() * dims_[tb]);
      SIFT_RETURN_IF_ERROR(
          store_->Push(static_cast<uint32_t>(tb), tk.keys, grads, global_step, lr_multiplier));
    }
    return absl::OkStatus();
  }

  embedding::EmbeddingStore* in_process() override { return store_.get(); }
  Status Snapshot(const std::string&, int64_t, const std::vector<int64_t>*,
                  CheckpointState::RemoteSnapshot*) override {
    return absl::OkStatus();
  }
  Status Restore(const std::string&, const CheckpointState&) override { return absl::OkStatus(); }
  Status Join() override { return absl::OkStatus(); }

 private:
  Status CheckTables(size_t n) const { return CheckBatchTables(n, dims_.size(), "the store"); }

  std::unique_ptr<embedding::EmbeddingStore> store_;
  std::vector<size_t> dims_;  // row floats per table id 0, 1, ...
};

}  // namespace

Status CheckTableIds(const std::vector<embedding::TableConfig>& tables) {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].table_id != t) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", tables[t].name, " has id ", tables[t].table_id, ", expected ", t));
    }
  }
  return absl::OkStatus();
}

Status CheckBatchTables(size_t batch_tables, size_t held, const char* holder) {
  if (batch_tables == held) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the batch has keys of ", batch_tables, " tables, ", holder, " holds ", held));
}

StatusOr<std::unique_ptr<TrainerTables>> CreateInProcessTables(
    std::vector<embedding::TableConfig> tables, const embedding::StoreOptions& options) {
  SIFT_RETURN_IF_ERROR(CheckTableIds(tables));
  std::vector<size_t> dims(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) dims[t] = static_cast<size_t>(tables[t].dim);
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<embedding::EmbeddingStore> store,
                        embedding::EmbeddingStore::Create(std::move(tables), options));
  return std::unique_ptr<TrainerTables>(new InProcessTables(std::move(store), std::move(dims)));
}

}  // namespace sift::worker
