// The tables on a job's embedding servers (worker/trainer_tables.h), through EmbeddingClient.
// Not in a SIFT_MINIMAL build (remote_tables_unavailable.cc takes its place).
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/wire_float.h"
#include "worker/embedding_client.h"
#include "worker/trainer_tables.h"

namespace sift::worker {
namespace {

class RemoteTables final : public TrainerTables {
 public:
  RemoteTables(const RemoteTablesOptions& o, std::vector<embedding::TableConfig> tables)
      : o_(o), tables_(std::move(tables)) {}

  // Connects the clients; rank 0 of a fresh run starts the servers from empty tables (stale rows
  // of an earlier job would change the results). A resumed run's tables come from Restore.
  Status Connect() {
    EmbeddingClientOptions co;
    co.servers = o_.servers;
    co.security = o_.security;
    SIFT_ASSIGN_OR_RETURN(co.encoding, ParseWireFloat(o_.wire_encoding));
    SIFT_ASSIGN_OR_RETURN(pull_, EmbeddingClient::Connect(co));
    if (o_.prefetch) {
      SIFT_ASSIGN_OR_RETURN(push_, EmbeddingClient::Connect(co));
    }
    if (o_.fresh && rank() == 0) {
      SIFT_RETURN_IF_ERROR(pull_->Configure(o_.seed, tables_, /*replace=*/true));
    }
    return absl::OkStatus();
  }

  // One request per shard for all tables; training creates rows, evaluation only reads.
  Status Fetch(bool train, BatchKeys* keys, const std::function<Status(int)>& arrived) override {
    SIFT_RETURN_IF_ERROR(CheckTables(keys->tables.size()));
    std::vector<EmbeddingClient::PullItem> items;
    for (size_t tb = 0; tb < keys->tables.size(); ++tb) {
      TableKeys& tk = keys->tables[tb];
      const size_t dim = static_cast<size_t>(tables_[tb].dim);
      items.push_back({static_cast<uint32_t>(tb), tk.keys,
                       absl::MakeSpan(tk.rows.data(), tk.keys.size() * dim)});
    }
    SIFT_RETURN_IF_ERROR(pull_->Pull(items, train));
    for (size_t tb = 0; tb < keys->tables.size(); ++tb) {
      SIFT_RETURN_IF_ERROR(arrived(static_cast<int>(tb)));
    }
    return absl::OkStatus();
  }

  // With one rank a push is sent as is. Several ranks: step pushes (below), or per_rank: with
  // staleness > 0 sent as is; at k = 0 the servers apply each rank's push as its own optimizer
  // step, and those steps do not commute
  // (Adam, Adagrad): ranks push one after another, in rank order, and nobody pulls the next step
  // before every push is in — so the run is deterministic for a fixed world size and every pull
  // sees every push of the steps before (fully synchronous).
  Status Push(const BatchKeys& keys, int64_t global_step, float lr_multiplier) override {
    SIFT_RETURN_IF_ERROR(CheckTables(keys.tables.size()));
    std::vector<EmbeddingClient::PushItem> items;
    for (size_t tb = 0; tb < keys.tables.size(); ++tb) {
      const TableKeys& tk = keys.tables[tb];
      const size_t dim = static_cast<size_t>(tables_[tb].dim);
      items.push_back({static_cast<uint32_t>(tb), tk.keys,
                       absl::MakeConstSpan(tk.grads.data(), tk.keys.size() * dim),
                       absl::MakeConstSpan(tk.l2)});
    }
    Collectives* coll = o_.collectives;
    const int world = coll->world_size();
    if (world == 1) return push_client()->Push(items, global_step, lr_multiplier);
    if (o_.step_pushes) {
      // Step pushes: every shard holds this rank's part until all ranks' are in, and the last
      // one applies the step (one update per row from the rank-ordered sum). At k = 0 the
      // barrier makes every shard's step applied before any rank pulls the next step: each
      // rank's pushes had returned, and the push completing a step returns after applying it.
      EmbeddingClient::StepPush tag;
      tag.group = o_.step_group;
      tag.generation = o_.generation;
      tag.rank = static_cast<uint32_t>(coll->rank());
      tag.world = static_cast<uint32_t>(world);
      SIFT_RETURN_IF_ERROR(push_client()->Push(items, global_step, lr_multiplier, &tag));
      if (o_.staleness > 0) return absl::OkStatus();
      return Annotate(coll->Barrier(), "push barrier");
    }
    if (o_.staleness > 0) return push_client()->Push(items, global_step, lr_multiplier);
    for (int r = 0; r < world; ++r) {
      if (r == coll->rank())
        SIFT_RETURN_IF_ERROR(push_client()->Push(items, global_step, lr_multiplier));
      SIFT_RETURN_IF_ERROR(Annotate(coll->Barrier(), "push barrier"));
    }
    return absl::OkStatus();
  }

  embedding::EmbeddingStore* in_process() override { return nullptr; }

  // The servers write the tables (a consistent cut: every rank's pushes have returned and no
  // pull is in flight); the manifest then names the snapshot.
  Status Snapshot(const std::string& name, int64_t global_step,
                  const std::vector<int64_t>* retain_steps,
                  CheckpointState::RemoteSnapshot* out) override {
    SIFT_ASSIGN_OR_RETURN(std::vector<pb::SnapshotResponse> shards,
                          pull_->Snapshot(name, global_step, retain_steps));
    out->name = name;
    out->num_shards = static_cast<uint32_t>(shards.size());
    out->files.clear();
    for (const pb::SnapshotResponse& r : shards) {
      out->files.push_back({r.path(), r.bytes(), r.crc32c(), r.rows()});
    }
    return absl::OkStatus();
  }

  // Rank 0 restores; the restored shards must be the ones the manifest recorded: same step,
  // same rows.
  Status Restore(const std::string& checkpoint_dir, const CheckpointState& st) override {
    if (rank() != 0) return absl::OkStatus();
    const std::string what =
        absl::StrCat(checkpoint_dir, ": restoring snapshot '", st.remote.name, "'");
    StatusOr<std::vector<pb::RestoreResponse>> restored_or = pull_->Restore(st.remote.name);
    SIFT_RETURN_IF_ERROR(Annotate(restored_or.status(), what));
    int64_t rows = 0, want_rows = 0;
    for (const pb::RestoreResponse& r : *restored_or) {
      rows += r.rows();
      if (r.step() != st.global_step || r.source_shards() != st.remote.num_shards) {
        return absl::DataLossError(absl::StrCat(
            what, ": the servers restored step ", r.step(), " of ", r.source_shards(),
            " shards, the manifest says step ", st.global_step, " of ", st.remote.num_shards));
      }
    }
    for (const CheckpointState::RemoteSnapshot::File& f : st.remote.files) want_rows += f.rows;
    if (rows != want_rows) {
      return absl::DataLossError(absl::StrCat(what, ": the servers restored ", rows,
                                              " rows, the manifest says ", want_rows));
    }
    return Annotate(pull_->Configure(o_.seed, tables_, /*replace=*/false),
                    absl::StrCat(checkpoint_dir, ": the restored tables"));
  }

  // Configure without replace is idempotent on the servers: it checks they are these tables.
  Status Join() override {
    if (rank() != 0) SIFT_RETURN_IF_ERROR(pull_->Configure(o_.seed, tables_, /*replace=*/false));
    if (push_ != nullptr) {
      SIFT_RETURN_IF_ERROR(push_->Configure(o_.seed, tables_, /*replace=*/false));
    }
    return absl::OkStatus();
  }

 private:
  int rank() const { return o_.collectives->rank(); }
  // The client that pushes: its own when pulls run on the prefetch thread (EmbeddingClient
  // takes one caller at a time).
  EmbeddingClient* push_client() { return push_ ? push_.get() : pull_.get(); }
  Status CheckTables(size_t n) const {
    return CheckBatchTables(n, tables_.size(), "the servers' job");
  }

  const RemoteTablesOptions o_;
  const std::vector<embedding::TableConfig> tables_;  // table id order
  std::unique_ptr<EmbeddingClient> pull_;             // pulls (and pushes, without prefetch), setup
  std::unique_ptr<EmbeddingClient> push_;  // pushes, when pulls run on the prefetch thread
};

}  // namespace

Status RemoteTablesSupported() { return absl::OkStatus(); }

StatusOr<std::unique_ptr<TrainerTables>> ConnectRemoteTables(
    const RemoteTablesOptions& options, std::vector<embedding::TableConfig> tables) {
  if (options.collectives == nullptr) {
    return absl::InvalidArgumentError("ConnectRemoteTables: no collectives");
  }
  SIFT_RETURN_IF_ERROR(CheckTableIds(tables));
  auto remote = std::make_unique<RemoteTables>(options, std::move(tables));
  SIFT_RETURN_IF_ERROR(remote->Connect());
  return std::unique_ptr<TrainerTables>(std::move(remote));
}

}  // namespace sift::worker
