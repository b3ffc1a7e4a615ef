// Fuzz target: the checkpoint manifest (worker/checkpoint.h LoadCheckpoint reading
// <dir>/manifest.json, then the files it names).
//
// Once per process two real checkpoints are saved (SaveCheckpoint) into the scratch directory:
// `local` (dense file + two table files of an in-process store) and `remote` (dense file + an
// embedding-server snapshot reference). Input: one mode byte, then the manifest's bytes, written
// over the manifest of `local` (mode bit 0 clear) or `remote` (set); bit 1 loads with a fresh
// in-process store of the same tables (clear: store == nullptr, the --embedding-servers path).
// Invariants: every error is a value with a message, never an exception or a crash; a load that
// succeeds leaves counters that are not negative.
#include <cstdint>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "server/embedding/table.h"
#include "tests/fuzz/fuzz_util.h"
#include "worker/checkpoint.h"

namespace {

using sift::embedding::EmbeddingStore;
using sift::worker::CheckpointState;

constexpr char kModel[] = "fuzz-model";
constexpr int64_t kParams = 7;

std::unique_ptr<EmbeddingStore> MakeStore() {
  std::vector<sift::embedding::TableConfig> tables(2);
  tables[0].table_id = 0;
  tables[0].name = "users";
  tables[0].dim = 2;
  tables[0].cardinality = 10;
  tables[1].table_id = 3;
  tables[1].name = "items";
  tables[1].dim = 3;
  tables[1].cardinality = 20;
  tables[1].optimizer.kind = sift::embedding::OptimizerKind::kAdagrad;
  auto store = EmbeddingStore::Create(tables, sift::embedding::StoreOptions{});
  FUZZ_CHECK(store.ok(), store.status().ToString());
  return *std::move(store);
}

CheckpointState MakeState(int64_t step) {
  CheckpointState s;
  s.epochs_done = 1;
  s.global_step = step;
  s.adam_t = step;
  s.seed = 42;
  s.model = kModel;
  for (int64_t i = 0; i < kParams; ++i) {
    s.params.push_back(0.5f * static_cast<float>(i));
    s.adam_m.push_back(0.01f);
    s.adam_v.push_back(0.001f);
  }
  return s;
}

struct Checkpoints {
  std::string local, remote;
};

// The two checkpoints, saved on first use.
const Checkpoints& Get() {
  static const Checkpoints* c = [] {
    auto* out = new Checkpoints;
    const auto& scratch = sift::fuzz::ScratchDir::Get();
    out->local = scratch.File("local");
    out->remote = scratch.File("remote");
    std::unique_ptr<EmbeddingStore> store = MakeStore();
    std::vector<float> rows(4 * 3);
    FUZZ_CHECK(store->Pull(0, std::vector<uint64_t>{1, 2}, absl::MakeSpan(rows.data(), 4)).ok(),
               "pull");
    FUZZ_CHECK(store->Pull(3, std::vector<uint64_t>{5, 9, 11, 19}, absl::MakeSpan(rows)).ok(),
               "pull");
    sift::Status s = sift::worker::SaveCheckpoint(out->local, MakeState(5), store.get());
    FUZZ_CHECK(s.ok(), s.ToString());
    CheckpointState remote = MakeState(8);
    remote.remote.name = "ckpt-8";
    remote.remote.num_shards = 2;
    remote.remote.files = {{"/snapshots/ckpt-8/shard-00000-of-00002.snap", 4096, 0x1234, 3},
                           {"/snapshots/ckpt-8/shard-00001-of-00002.snap", 4160, 0x5678, 4}};
    s = sift::worker::SaveCheckpoint(out->remote, remote, nullptr);
    FUZZ_CHECK(s.ok(), s.ToString());
    return out;
  }();
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  const Checkpoints& c = Get();
  const std::string& dir = (mode & 1) ? c.remote : c.local;
  sift::fuzz::WriteFile(dir + "/manifest.json", in.Rest());
  std::unique_ptr<EmbeddingStore> store = (mode & 2) ? MakeStore() : nullptr;
  CheckpointState state;
  const sift::Status s = sift::worker::LoadCheckpoint(dir, kModel, kParams, &state, store.get());
  sift::fuzz::Note("load", s);
  if (!s.ok()) {
    FUZZ_CHECK(!s.message().empty(), s.ToString());
    return 0;
  }
  FUZZ_CHECK(state.epochs_done >= 0 && state.global_step >= 0 && state.adam_t >= 0, "counters");
  FUZZ_CHECK(static_cast<int64_t>(state.params.size()) == kParams, "dense parameters");
  return 0;
}

// Seeds for the standalone driver's --write-seeds: the two genuine manifests under each mode.
extern "C" void SiftFuzzWriteSeeds(const char* out_dir) {
  const Checkpoints& c = Get();
  for (int mode = 0; mode < 4; ++mode) {
    auto text = sift::ReadFileToString(((mode & 1) ? c.remote : c.local) + "/manifest.json");
    FUZZ_CHECK(text.ok(), text.status().ToString());
    sift::fuzz::WriteFile(std::string(out_dir) + "/manifest-" + std::to_string(mode),
                          std::string(1, static_cast<char>(mode)) + *text);
  }
}
