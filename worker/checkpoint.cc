#include "worker/checkpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/data/binary_file.h"
#include "common/file_util.h"
#include "nlohmann/json.hpp"

namespace sift::worker {
namespace {

constexpr char kDenseMagic[] = "SIFTDENS";
constexpr char kTableMagic[] = "SIFTTABL";
constexpr char kManifest[] = "manifest.json";
constexpr char kFormat[] = "sift-checkpoint";
constexpr int kVersion = 1;

// Data files carry the global step in their names, so a new save never overwrites the files the
// current manifest points to: until the new manifest replaces the old one (an atomic rename), the
// old checkpoint stays whole.
std::string DenseFile(int64_t step) { return absl::StrCat("dense-", step, ".bin"); }
std::string TableFile(uint32_t table_id, int64_t step) {
  return absl::StrCat("table_", table_id, "-", step, ".bin");
}
// Our data files: dense-<step>.bin, table_<id>-<step>.bin.
bool IsDataFile(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0 &&
         (name.rfind("dense-", 0) == 0 || name.rfind("table_", 0) == 0);
}

// Size and CRC32C of a whole file, for the manifest.
StatusOr<nlohmann::json> FileEntry(const std::string& dir, const std::string& name) {
  SIFT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(JoinPath(dir, name)));
  return nlohmann::json{
      {"name", name}, {"bytes", bytes.size()}, {"crc32c", Crc32c(bytes.data(), bytes.size())}};
}

Status WriteDense(const std::string& path, const CheckpointState& s) {
  const uint64_t n = s.params.size();
  if (s.adam_m.size() != n || s.adam_v.size() != n) {
    return absl::InvalidArgumentError("checkpoint: Adam state size differs from the parameters");
  }
  data::BinaryFileWriter w;
  SIFT_RETURN_IF_ERROR(w.Begin(path, kDenseMagic, {n, 0, 0}));
  SIFT_RETURN_IF_ERROR(w.Section(s.params.data(), n * sizeof(float)));
  SIFT_RETURN_IF_ERROR(w.Section(s.adam_m.data(), n * sizeof(float)));
  SIFT_RETURN_IF_ERROR(w.Section(s.adam_v.data(), n * sizeof(float)));
  return w.Finish();
}

Status WriteTable(const std::string& path, const embedding::EmbeddingStore::TableDump& d) {
  data::BinaryFileWriter w;
  const uint64_t n = d.ids.size();
  SIFT_RETURN_IF_ERROR(
      w.Begin(path, kTableMagic,
              {n, static_cast<uint64_t>(d.row_floats), static_cast<uint64_t>(d.table_id)}));
  SIFT_RETURN_IF_ERROR(w.Section(d.ids.data(), n * sizeof(uint64_t)));
  SIFT_RETURN_IF_ERROR(w.Section(d.data.data(), d.data.size() * sizeof(float)));
  return w.Finish();
}

StatusOr<const nlohmann::json*> Field(const nlohmann::json& j, const char* key,
                                      const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) {
    return absl::DataLossError(absl::StrCat(where, ": missing field '", key, "'"));
  }
  return &*it;
}

// A numeric field of `j`, checked before it is converted (a float such as 4.4e34 in an integer
// field made nlohmann's get<int> undefined behaviour; found by tests/fuzz checkpoint_manifest):
// DATA_LOSS naming the field when it is missing, not a number of the kind, or out of T's range.
template <typename T>
StatusOr<T> IntegerAt(const nlohmann::json& j, const char* key, const std::string& where) {
  SIFT_ASSIGN_OR_RETURN(const nlohmann::json* v, Field(j, key, where));
  bool ok = false;
  T out = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    ok = u <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    out = static_cast<T>(u);
  } else if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    ok = i >= 0 ? static_cast<uint64_t>(i) <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                : std::numeric_limits<T>::is_signed &&
                      i >= static_cast<int64_t>(std::numeric_limits<T>::min());
    out = static_cast<T>(i);
  }
  if (!ok) {
    return absl::DataLossError(absl::StrCat(
        where, ": field '", key, "': expected an integer in [", std::numeric_limits<T>::min(), ", ",
        std::numeric_limits<T>::max(), "], got ", v->dump().substr(0, 64)));
  }
  return out;
}

StatusOr<float> FloatAt(const nlohmann::json& j, const char* key, const std::string& where) {
  SIFT_ASSIGN_OR_RETURN(const nlohmann::json* v, Field(j, key, where));
  const double d = v->is_number() ? v->get<double>() : std::nan("");
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) {
    return absl::DataLossError(absl::StrCat(
        where, ": field '", key, "': expected a finite float, got ", v->dump().substr(0, 64)));
  }
  return static_cast<float>(d);
}

}  // namespace

Status SaveCheckpoint(const std::string& dir, const CheckpointState& state,
                      const embedding::EmbeddingStore* store) {
  if (store == nullptr && state.remote.name.empty()) {
    return absl::InvalidArgumentError("checkpoint: neither tables nor an embedding snapshot");
  }
  SIFT_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string manifest = JoinPath(dir, kManifest);
  nlohmann::json files = nlohmann::json::array();
  const std::string dense_name = DenseFile(state.global_step);
  SIFT_RETURN_IF_ERROR(WriteDense(JoinPath(dir, dense_name), state));
  SIFT_ASSIGN_OR_RETURN(nlohmann::json dense_entry, FileEntry(dir, dense_name));
  files.push_back(dense_entry);
  nlohmann::json tables = nlohmann::json::array();
  const std::vector<embedding::TableStats> stats =
      store != nullptr ? store->Stats() : std::vector<embedding::TableStats>();
  for (const embedding::TableStats& t : stats) {
    SIFT_ASSIGN_OR_RETURN(embedding::EmbeddingStore::TableDump d, store->DumpTable(t.table_id));
    const std::string name = TableFile(t.table_id, state.global_step);
    SIFT_RETURN_IF_ERROR(WriteTable(JoinPath(dir, name), d));
    SIFT_ASSIGN_OR_RETURN(nlohmann::json entry, FileEntry(dir, name));
    files.push_back(entry);
    tables.push_back({{"table_id", t.table_id},
                      {"name", t.name},
                      {"rows", d.ids.size()},
                      {"row_floats", d.row_floats},
                      {"file", name}});
  }
  nlohmann::json m = {{"format", kFormat},
                      {"version", kVersion},
                      {"epochs_done", state.epochs_done},
                      {"global_step", state.global_step},
                      {"adam_t", state.adam_t},
                      {"seed", state.seed},
                      {"model", state.model},
                      {"dense_params", state.params.size()},
                      {"dense_file", dense_name},
                      {"tables", tables},
                      {"files", files}};
  if (state.loss_scale.present) {
    m["loss_scaler"] = {{"scale", state.loss_scale.scale},
                        {"good_steps", state.loss_scale.good_steps}};
  }
  if (state.selection.present) {
    const CheckpointState::Selection& sel = state.selection;
    m["selection"] = {{"best_epoch", sel.best_epoch},
                      {"best_global_step", sel.best_global_step},
                      {"best_validation_auc", sel.best_validation_auc},
                      {"best_test_auc", sel.best_test_auc},
                      {"best_test_loss", sel.best_test_loss}};
  }
  if (!state.job_id.empty()) m["job"] = {{"id", state.job_id}, {"owner", state.owner}};
  if (store == nullptr) {
    nlohmann::json shard_files = nlohmann::json::array();
    for (const CheckpointState::RemoteSnapshot::File& f : state.remote.files) {
      shard_files.push_back({{"path", f.path},
                             {"bytes", f.bytes},
                             {"payload_crc32c", f.payload_crc32c},
                             {"rows", f.rows}});
    }
    m["embedding_snapshot"] = {{"name", state.remote.name},
                               {"num_shards", state.remote.num_shards},
                               {"files", shard_files}};
  }
  SIFT_RETURN_IF_ERROR(WriteFileAtomic(manifest, m.dump(2) + "\n"));  // the commit point
  // Remove the previous checkpoint's data files (best effort: leftovers are harmless).
  std::set<std::string> keep;
  for (const nlohmann::json& f : files) keep.insert(f["name"].get<std::string>());
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (IsDataFile(name) && !keep.contains(name)) ::unlink(JoinPath(dir, name).c_str());
    }
    ::closedir(d);
  }
  return absl::OkStatus();
}

namespace {

// A manifest names files of its own directory only (found by tests/fuzz, findings/
// checkpoint_manifest: "../../dev/zero" was read whole, exhausting memory).
Status CheckPlainName(const std::string& manifest_path, const char* field,
                      const std::string& name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string("/\0", 2)) != std::string::npos) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": field '", field, "': '", name,
                                            "' is not a file name of this directory"));
  }
  return absl::OkStatus();
}

}  // namespace

Status LoadCheckpoint(const std::string& dir, const std::string& expect_model,
                      int64_t expect_params, CheckpointState* state,
                      embedding::EmbeddingStore* store) {
  const std::string manifest_path = JoinPath(dir, kManifest);
  if (!PathExists(manifest_path)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": not a checkpoint (no ", kManifest,
                                                      "; an interrupted save leaves none)"));
  }
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest_path));
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": not valid JSON"));
  }
  try {
    const auto version = m.find("version");
    if (m.value("format", "") != kFormat || version == m.end() || !version->is_number_integer() ||
        version->get<int64_t>() != kVersion) {
      return absl::DataLossError(
          absl::StrCat(manifest_path, ": not a ", kFormat, " version ", kVersion, " manifest"));
    }
    SIFT_ASSIGN_OR_RETURN(const nlohmann::json* model, Field(m, "model", manifest_path));
    if (model->get<std::string>() != expect_model) {
      return absl::InvalidArgumentError(
          absl::StrCat(manifest_path, ": field 'model': the checkpoint holds '",
                       model->get<std::string>(), "' but this run builds '", expect_model, "'"));
    }
    SIFT_ASSIGN_OR_RETURN(const nlohmann::json* files, Field(m, "files", manifest_path));
    for (const nlohmann::json& f : *files) {
      const std::string name = f.at("name").get<std::string>();
      SIFT_RETURN_IF_ERROR(CheckPlainName(manifest_path, "files", name));
      SIFT_ASSIGN_OR_RETURN(nlohmann::json actual, FileEntry(dir, name));
      if (actual["bytes"] != f.at("bytes") || actual["crc32c"] != f.at("crc32c")) {
        return absl::DataLossError(absl::StrCat(JoinPath(dir, name), ": size/CRC32C ",
                                                actual["bytes"].dump(), "/",
                                                actual["crc32c"].dump(), " != manifest ",
                                                f.at("bytes").dump(), "/", f.at("crc32c").dump()));
      }
    }
    SIFT_ASSIGN_OR_RETURN(state->epochs_done, IntegerAt<int64_t>(m, "epochs_done", manifest_path));
    SIFT_ASSIGN_OR_RETURN(state->global_step, IntegerAt<int64_t>(m, "global_step", manifest_path));
    SIFT_ASSIGN_OR_RETURN(state->adam_t, IntegerAt<int64_t>(m, "adam_t", manifest_path));
    for (const auto& [name, v] :
         {std::pair<const char*, int64_t>{"epochs_done", state->epochs_done},
          {"global_step", state->global_step},
          {"adam_t", state->adam_t}}) {
      if (v < 0) {
        return absl::DataLossError(
            absl::StrCat(manifest_path, ": field '", name, "' is negative (", v, ")"));
      }
    }
    SIFT_ASSIGN_OR_RETURN(state->seed, IntegerAt<uint64_t>(m, "seed", manifest_path));
    state->model = model->get<std::string>();
    if (const auto ls = m.find("loss_scaler"); ls != m.end()) {
      state->loss_scale.present = true;
      SIFT_ASSIGN_OR_RETURN(state->loss_scale.scale, FloatAt(*ls, "scale", manifest_path));
      SIFT_ASSIGN_OR_RETURN(state->loss_scale.good_steps,
                            IntegerAt<int64_t>(*ls, "good_steps", manifest_path));
      int exponent = 0;
      // Loss scales are powers of two (so that unscaling is exact).
      if (!(state->loss_scale.scale > 0) || !std::isfinite(state->loss_scale.scale) ||
          std::frexp(state->loss_scale.scale, &exponent) != 0.5f ||
          state->loss_scale.good_steps < 0) {
        return absl::DataLossError(absl::StrCat(manifest_path, ": field 'loss_scaler' holds scale ",
                                                state->loss_scale.scale, " and good_steps ",
                                                state->loss_scale.good_steps));
      }
    }

    if (const auto sel = m.find("selection"); sel != m.end()) {
      CheckpointState::Selection& out = state->selection;
      out.present = true;
      SIFT_ASSIGN_OR_RETURN(out.best_epoch, IntegerAt<int64_t>(*sel, "best_epoch", manifest_path));
      SIFT_ASSIGN_OR_RETURN(out.best_global_step,
                            IntegerAt<int64_t>(*sel, "best_global_step", manifest_path));
      for (const auto& [name, v] :
           {std::pair<const char*, double*>{"best_validation_auc", &out.best_validation_auc},
            {"best_test_auc", &out.best_test_auc},
            {"best_test_loss", &out.best_test_loss}}) {
        // NaN (a cluster rank's test AUC, computed by the coordinator) is stored as null.
        const auto it = sel->find(name);
        if (it == sel->end() || !(it->is_number() || it->is_null())) {
          return absl::DataLossError(
              absl::StrCat(manifest_path, ": field 'selection.", name, "' is not a number"));
        }
        *v = it->is_null() ? std::nan("") : it->get<double>();
      }
      if (out.best_epoch < -1 || out.best_epoch >= state->epochs_done || out.best_global_step < 0 ||
          out.best_global_step > state->global_step) {
        return absl::DataLossError(
            absl::StrCat(manifest_path, ": field 'selection' holds best_epoch ", out.best_epoch,
                         " and best_global_step ", out.best_global_step, " for a checkpoint of ",
                         state->epochs_done, " epoch(s) and step ", state->global_step));
      }
    }

    SIFT_RETURN_IF_ERROR(
        CheckPlainName(manifest_path, "dense_file", m.at("dense_file").get<std::string>()));
    const std::string dense_path = JoinPath(dir, m.at("dense_file").get<std::string>());
    SIFT_ASSIGN_OR_RETURN(data::BinaryFile dense, data::BinaryFile::Open(dense_path, kDenseMagic,
                                                                         /*verify=*/true));
    const uint64_t n = dense.header().counts[0];
    if (static_cast<int64_t>(n) != expect_params) {
      return absl::InvalidArgumentError(
          absl::StrCat(dense_path, ": ", n, " dense parameters, the model has ", expect_params));
    }
    data::SectionReader r(dense);
    for (std::vector<float>* v : {&state->params, &state->adam_m, &state->adam_v}) {
      SIFT_ASSIGN_OR_RETURN(const uint8_t* p, r.NextArray(n, sizeof(float)));
      v->resize(n);
      std::memcpy(v->data(), p, n * sizeof(float));
    }
    const auto snap = m.find("embedding_snapshot");
    if (store == nullptr || snap != m.end()) {
      if (snap == m.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            manifest_path, ": holds in-process tables; load it without --embedding-servers"));
      }
      if (store != nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            manifest_path, ": its tables are the embedding-server snapshot '",
            snap->at("name").get<std::string>(), "'; load it with --embedding-servers"));
      }
      state->remote.name = snap->at("name").get<std::string>();
      SIFT_ASSIGN_OR_RETURN(state->remote.num_shards,
                            IntegerAt<uint32_t>(*snap, "num_shards", manifest_path));
      state->remote.files.clear();
      for (const nlohmann::json& f : snap->at("files")) {
        CheckpointState::RemoteSnapshot::File file;
        file.path = f.at("path").get<std::string>();
        SIFT_ASSIGN_OR_RETURN(file.bytes, IntegerAt<uint64_t>(f, "bytes", manifest_path));
        SIFT_ASSIGN_OR_RETURN(file.payload_crc32c,
                              IntegerAt<uint32_t>(f, "payload_crc32c", manifest_path));
        SIFT_ASSIGN_OR_RETURN(file.rows, IntegerAt<int64_t>(f, "rows", manifest_path));
        state->remote.files.push_back(std::move(file));
      }
      return absl::OkStatus();
    }
    SIFT_ASSIGN_OR_RETURN(const nlohmann::json* tables, Field(m, "tables", manifest_path));
    // Every table of the store exactly once, before any row is loaded.
    std::set<uint32_t> want, have;
    for (const embedding::TableStats& t : store->Stats()) want.insert(t.table_id);
    for (const nlohmann::json& t : *tables) {
      SIFT_ASSIGN_OR_RETURN(const uint32_t id, IntegerAt<uint32_t>(t, "table_id", manifest_path));
      if (!have.insert(id).second) {
        return absl::DataLossError(absl::StrCat(manifest_path, ": field 'tables': table ",
                                                t.at("table_id").dump(), " listed twice"));
      }
    }
    if (want != have) {
      return absl::InvalidArgumentError(
          absl::StrCat(manifest_path, ": field 'tables': the checkpoint holds ", have.size(),
                       " tables, this run's model has ", want.size(), " (different tables)"));
    }
    for (const nlohmann::json& t : *tables) {
      SIFT_RETURN_IF_ERROR(
          CheckPlainName(manifest_path, "tables.file", t.at("file").get<std::string>()));
      const std::string path = JoinPath(dir, t.at("file").get<std::string>());
      SIFT_ASSIGN_OR_RETURN(data::BinaryFile tf,
                            data::BinaryFile::Open(path, kTableMagic, /*verify=*/true));
      const auto& c = tf.header().counts;
      data::SectionReader tr(tf);
      SIFT_ASSIGN_OR_RETURN(const uint8_t* ids, tr.NextArray(c[0], sizeof(uint64_t)));
      SIFT_ASSIGN_OR_RETURN(const uint8_t* rows, tr.NextArray(c[0], sizeof(float), c[1]));
      if (c[1] > (1u << 20)) return absl::DataLossError(absl::StrCat(path, ": bad row size"));
      SIFT_ASSIGN_OR_RETURN(const uint64_t id, IntegerAt<uint64_t>(t, "table_id", manifest_path));
      if (c[2] != id) {
        return absl::DataLossError(absl::StrCat(path, ": holds table ", c[2],
                                                ", the manifest says ", t.at("table_id").dump()));
      }
      Status s =
          store->LoadRows(static_cast<uint32_t>(c[2]), static_cast<int>(c[1]),
                          absl::MakeConstSpan(reinterpret_cast<const uint64_t*>(ids), c[0]),
                          absl::MakeConstSpan(reinterpret_cast<const float*>(rows), c[0] * c[1]));
      if (!s.ok()) return Annotate(s, path);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": ", e.what()));
  }
  return absl::OkStatus();
}

namespace {
constexpr char kStepPrefix[] = "step-";
constexpr size_t kStepDigits = 12;

// N of "step-<N>" (digits only), or -1.
int64_t StepOfDirName(const std::string& name) {
  const size_t p = sizeof(kStepPrefix) - 1;
  if (name.compare(0, p, kStepPrefix) != 0 || name.size() == p || name.size() > p + 18) return -1;
  int64_t step = 0;
  for (size_t i = p; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}
}  // namespace

std::string CheckpointStepDir(const std::string& job_dir, int64_t global_step) {
  std::string digits = absl::StrCat(global_step);
  if (digits.size() < kStepDigits) digits.insert(0, kStepDigits - digits.size(), '0');
  return JoinPath(job_dir, absl::StrCat(kStepPrefix, digits));
}

std::vector<std::pair<int64_t, std::string>> ListStepCheckpoints(const std::string& job_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = opendir(job_dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    const int64_t step = StepOfDirName(e->d_name);
    if (step < 0) continue;
    const std::string path = JoinPath(job_dir, e->d_name);
    if (PathExists(JoinPath(path, kManifest))) out.emplace_back(step, path);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

std::string ResolveCheckpointDir(const std::string& path) {
  if (PathExists(JoinPath(path, kManifest))) return path;
  const std::vector<std::pair<int64_t, std::string>> steps = ListStepCheckpoints(path);
  return steps.empty() ? path : steps.front().second;
}

Status PruneStepCheckpoints(const std::string& job_dir, int64_t committed_step, int keep,
                            int64_t protect_step) {
  // Complete ones at or before the committed step that stay.
  std::set<int64_t> kept;
  for (const auto& [step, path] : ListStepCheckpoints(job_dir)) {
    if (step <= committed_step && kept.size() < static_cast<size_t>(keep)) kept.insert(step);
  }
  if (protect_step >= 0) kept.insert(protect_step);
  Status first;
  DIR* d = opendir(job_dir.c_str());
  if (d == nullptr) return absl::OkStatus();
  std::vector<std::string> doomed;
  while (const dirent* e = readdir(d)) {
    const int64_t step = StepOfDirName(e->d_name);
    if (step >= 0 && step < committed_step && !kept.contains(step)) doomed.push_back(e->d_name);
  }
  closedir(d);
  for (const std::string& name : doomed) {
    std::error_code ec;
    std::filesystem::remove_all(JoinPath(job_dir, name), ec);
    if (ec && first.ok()) {
      first = absl::InternalError(
          absl::StrCat("deleting old checkpoint ", JoinPath(job_dir, name), ": ", ec.message()));
    }
  }
  return first;
}

}  // namespace sift::worker
