#include "server/coordinator/job_store.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/dllogger.h"
#include "common/file_util.h"
#include "nlohmann/json.hpp"

namespace sift::coordinator {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kFormat = 1;

// JSON has no NaN/Infinity: those are written as strings (as common/dllogger.h does).
Json Num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

// Reading: every accessor names the field; a json exception becomes this error type.
struct FieldError {
  std::string field, what;
};

const Json& At(const Json& j, const char* key) {
  if (!j.is_object()) throw FieldError{key, "the enclosing value is not an object"};
  auto it = j.find(key);
  if (it == j.end()) throw FieldError{key, "missing"};
  return *it;
}
double GetDouble(const Json& j, const char* key) {
  const Json& v = At(j, key);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  throw FieldError{key, "not a number"};
}
int64_t GetInt(const Json& j, const char* key) {
  const Json& v = At(j, key);
  if (!v.is_number_integer()) throw FieldError{key, "not an integer"};
  return v.get<int64_t>();
}
bool GetBool(const Json& j, const char* key) {
  const Json& v = At(j, key);
  if (!v.is_boolean()) throw FieldError{key, "not a boolean"};
  return v.get<bool>();
}
std::string GetString(const Json& j, const char* key) {
  const Json& v = At(j, key);
  if (!v.is_string()) throw FieldError{key, "not a string"};
  return v.get<std::string>();
}
const Json& GetArray(const Json& j, const char* key) {
  const Json& v = At(j, key);
  if (!v.is_array()) throw FieldError{key, "not an array"};
  return v;
}

Json EpochResultToJson(const pb::EpochResult& e) {
  Json j;
  j["epoch"] = e.epoch();
  j["train_auc"] = Num(e.train_auc());
  j["train_loss"] = Num(e.train_loss());
  j["test_auc"] = Num(e.test_auc());
  j["test_loss"] = Num(e.test_loss());
  j["samples_per_second"] = Num(e.samples_per_second());
  j["train_time_s"] = Num(e.train_time_s());
  return j;
}

pb::EpochResult EpochResultFromJson(const Json& j) {
  pb::EpochResult e;
  e.set_epoch(GetInt(j, "epoch"));
  e.set_train_auc(GetDouble(j, "train_auc"));
  e.set_train_loss(GetDouble(j, "train_loss"));
  e.set_test_auc(GetDouble(j, "test_auc"));
  e.set_test_loss(GetDouble(j, "test_loss"));
  e.set_samples_per_second(GetDouble(j, "samples_per_second"));
  e.set_train_time_s(GetDouble(j, "train_time_s"));
  return e;
}

JobRecord RecordFromJson(const Json& j) {
  JobRecord r;
  if (GetInt(j, "format") != kFormat) throw FieldError{"format", "unknown record format"};
  pb::JobInfo& i = r.info;
  i.set_job_id(GetString(j, "job_id"));
  i.set_name(GetString(j, "name"));
  // Records written before jobs had owners have none.
  if (j.contains("owner")) i.set_owner(GetString(j, "owner"));
  // Records written before results directories were per job have none (Coordinator::Open
  // derives it).
  if (j.contains("results_dir")) i.set_results_dir(GetString(j, "results_dir"));
  pb::JobState state;
  if (!pb::JobState_Parse(GetString(j, "state"), &state) || state == pb::JOB_STATE_UNSPECIFIED) {
    throw FieldError{"state", "not a job state"};
  }
  i.set_state(state);
  i.set_message(GetString(j, "message"));
  i.set_spec_yaml(GetString(j, "spec_yaml"));
  i.set_generation(GetInt(j, "generation"));
  i.set_recoveries(GetInt(j, "recoveries"));
  i.set_epoch(GetInt(j, "epoch"));
  i.set_epochs(GetInt(j, "epochs"));
  i.set_global_step(GetInt(j, "global_step"));
  i.set_steps_per_epoch(GetInt(j, "steps_per_epoch"));
  i.set_samples_total(GetInt(j, "samples_total"));
  i.set_samples_per_second(GetDouble(j, "samples_per_second"));
  i.set_last_loss(GetDouble(j, "last_loss"));
  for (const Json& e : GetArray(j, "epochs_done")) *i.add_epochs_done() = EpochResultFromJson(e);
  const Json& c = At(j, "last_checkpoint");
  i.mutable_last_checkpoint()->set_dir(GetString(c, "dir"));
  i.mutable_last_checkpoint()->set_epochs_done(GetInt(c, "epochs_done"));
  i.mutable_last_checkpoint()->set_global_step(GetInt(c, "global_step"));
  i.mutable_last_checkpoint()->set_generation(GetInt(c, "generation"));
  i.set_oracle_test_auc(GetDouble(j, "oracle_test_auc"));
  i.set_submit_time(GetDouble(j, "submit_time"));
  i.set_start_time(GetDouble(j, "start_time"));
  i.set_end_time(GetDouble(j, "end_time"));
  i.set_time_to_train_s(GetDouble(j, "time_to_train_s"));
  for (const Json& w : GetArray(j, "workers")) {
    if (!w.is_string()) throw FieldError{"workers", "not an array of strings"};
    i.add_workers(w.get<std::string>());
  }
  for (const Json& s : GetArray(j, "servers")) {
    if (!s.is_string()) throw FieldError{"servers", "not an array of strings"};
    i.add_servers(s.get<std::string>());
  }
  r.dll_metadata_written = GetBool(j, "dll_metadata_written");
  r.steps_total = GetInt(j, "steps_total");
  for (const Json& p : GetArray(j, "epoch_perf")) {
    EpochPerf perf;
    perf.train_time_s = GetDouble(p, "train_time_s");
    for (const Json& m : GetArray(p, "metrics")) {
      perf.metrics.emplace_back(GetString(m, "name"), GetDouble(m, "value"));
    }
    r.epoch_perf[GetInt(p, "epoch")] = std::move(perf);
  }
  return r;
}

StatusOr<std::vector<std::string>> ReadLogLines(const std::string& path) {
  if (!PathExists(path)) return std::vector<std::string>{};
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

}  // namespace

std::string JobRecordToJson(const JobRecord& r) {
  const pb::JobInfo& i = r.info;
  Json j;
  j["format"] = kFormat;
  j["job_id"] = i.job_id();
  j["name"] = i.name();
  j["owner"] = i.owner();
  j["results_dir"] = i.results_dir();
  j["state"] = pb::JobState_Name(i.state());
  j["message"] = i.message();
  j["spec_yaml"] = i.spec_yaml();
  j["generation"] = i.generation();
  j["recoveries"] = i.recoveries();
  j["epoch"] = i.epoch();
  j["epochs"] = i.epochs();
  j["global_step"] = i.global_step();
  j["steps_per_epoch"] = i.steps_per_epoch();
  j["samples_total"] = i.samples_total();
  j["samples_per_second"] = Num(i.samples_per_second());
  j["last_loss"] = Num(i.last_loss());
  Json epochs = Json::array();
  for (const pb::EpochResult& e : i.epochs_done()) epochs.push_back(EpochResultToJson(e));
  j["epochs_done"] = std::move(epochs);
  Json c;
  c["dir"] = i.last_checkpoint().dir();
  c["epochs_done"] = i.last_checkpoint().epochs_done();
  c["global_step"] = i.last_checkpoint().global_step();
  c["generation"] = i.last_checkpoint().generation();
  j["last_checkpoint"] = std::move(c);
  j["oracle_test_auc"] = Num(i.oracle_test_auc());
  j["submit_time"] = Num(i.submit_time());
  j["start_time"] = Num(i.start_time());
  j["end_time"] = Num(i.end_time());
  j["time_to_train_s"] = Num(i.time_to_train_s());
  j["workers"] = Json(std::vector<std::string>(i.workers().begin(), i.workers().end()));
  j["servers"] = Json(std::vector<std::string>(i.servers().begin(), i.servers().end()));
  j["dll_metadata_written"] = r.dll_metadata_written;
  j["steps_total"] = r.steps_total;
  Json perfs = Json::array();
  for (const auto& [epoch, perf] : r.epoch_perf) {
    Json p;
    p["epoch"] = epoch;
    p["train_time_s"] = Num(perf.train_time_s);
    Json metrics = Json::array();
    for (const auto& [name, value] : perf.metrics) {
      Json m;
      m["name"] = name;
      m["value"] = Num(value);
      metrics.push_back(std::move(m));
    }
    p["metrics"] = std::move(metrics);
    perfs.push_back(std::move(p));
  }
  j["epoch_perf"] = std::move(perfs);
  return j.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

StatusOr<JobRecord> JobRecordFromJson(absl::string_view text, const std::string& filename) {
  try {
    const Json j = Json::parse(text.begin(), text.end());
    return RecordFromJson(j);
  } catch (const FieldError& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(filename, ": corrupt job record: field ", e.field, ": ", e.what));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ": corrupt job record: ", e.what()));
  }
}

int64_t JobNumber(absl::string_view job_id) {
  if (!absl::ConsumePrefix(&job_id, "job-")) return -1;
  int64_t n = 0;
  if (job_id.empty() || !std::all_of(job_id.begin(), job_id.end(), ::isdigit) ||
      !absl::SimpleAtoi(job_id, &n) || n <= 0) {
    return -1;
  }
  return n;
}

StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& state_dir, Loaded* loaded) {
  if (state_dir.empty()) return absl::InvalidArgumentError("--state-dir is required");
  SIFT_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(state_dir, "a coordinator"));
  std::unique_ptr<JobStore> store(new JobStore(state_dir, std::move(lock)));
  const std::string jobs_dir = JoinPath(state_dir, "jobs");
  SIFT_RETURN_IF_ERROR(MakeDirs(jobs_dir));
  *loaded = Loaded();

  // Records, by job number.
  std::vector<std::pair<int64_t, std::string>> files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(jobs_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!absl::EndsWith(name, ".json")) continue;  // logs, temp files of interrupted writes
    const std::string id = name.substr(0, name.size() - 5);
    const int64_t n = JobNumber(id);
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->path().string(), ": not a job record name (job-<N>.json)"));
    }
    files.emplace_back(n, id);
  }
  if (ec) {
    return absl::InternalError(absl::StrCat(jobs_dir, ": cannot list: ", ec.message()));
  }
  std::sort(files.begin(), files.end());
  int64_t max_number = 0;
  for (const auto& [n, id] : files) {
    const std::string path = store->RecordPath(id);
    SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    SIFT_ASSIGN_OR_RETURN(JobRecord record, JobRecordFromJson(text, path));
    if (record.info.job_id() != id) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": corrupt job record: job_id \"",
                                                     record.info.job_id(),
                                                     "\" does not match the file name"));
    }
    SIFT_ASSIGN_OR_RETURN(std::vector<std::string> log, ReadLogLines(store->LogPath(id)));
    loaded->jobs.push_back(std::move(record));
    loaded->logs.push_back(std::move(log));
    max_number = std::max(max_number, n);
  }

  // The next number: the persisted counter, and never one that a record already uses.
  int64_t next = 1;
  const std::string next_path = JoinPath(state_dir, "next_job_id");
  if (PathExists(next_path)) {
    SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(next_path));
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &next) || next < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(next_path, ": corrupt: expected a positive job number, got \"",
                       absl::StripAsciiWhitespace(text), "\""));
    }
  }
  loaded->next_job_number = std::max(next, max_number + 1);
  return store;
}

std::string JobStore::RecordPath(const std::string& job_id) const {
  return JoinPath(JoinPath(state_dir_, "jobs"), job_id + ".json");
}

std::string JobStore::LogPath(const std::string& job_id) const {
  return JoinPath(JoinPath(state_dir_, "jobs"), job_id + ".log");
}

Status JobStore::Save(const JobRecord& record) {
  return WriteFileAtomic(RecordPath(record.info.job_id()), JobRecordToJson(record));
}

Status JobStore::AppendLog(const std::string& job_id, absl::string_view line) {
  SIFT_ASSIGN_OR_RETURN(auto sink, FileLineSink::Open(LogPath(job_id)));
  return sink->WriteLine(line);
}

Status JobStore::SaveNextJobNumber(int64_t next) {
  return WriteFileAtomic(JoinPath(state_dir_, "next_job_id"), absl::StrCat(next, "\n"));
}

}  // namespace sift::coordinator
