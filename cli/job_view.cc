#include "cli/job_view.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/model_selection.h"

namespace sift::cli {
namespace {

using coordinator::JobStateName;

nlohmann::json EpochToJson(const pb::EpochResult& e) {
  nlohmann::json j = {{"epoch", e.epoch()},
                      {"train_auc", e.train_auc()},
                      {"train_loss", e.train_loss()},
                      {"test_auc", e.test_auc()},
                      {"test_loss", e.test_loss()},
                      {"samples_per_second", e.samples_per_second()},
                      {"train_time_s", e.train_time_s()}};
  if (e.has_validation()) {
    j["validation_auc"] = e.validation_auc();
    j["validation_loss"] = e.validation_loss();
  }
  return j;
}

// The epoch whose model the job keeps (its spec's training.keep_best: the best validation AUC
// of the epochs done, else the last; -1 before any), and that selection.
int64_t KeptEpoch(const pb::JobInfo& job, ModelSelection* sel) {
  if (job.epochs_done().empty()) return -1;
  for (const pb::EpochResult& e : job.epochs_done()) {
    if (e.has_validation()) sel->Update(e.epoch(), e.validation_auc(), e.test_auc(), e.test_loss());
  }
  StatusOr<JobSpec> spec = ParseJobSpec(job.spec_yaml(), "job spec");
  const bool keep_best = spec.ok() && spec->training.keep_best == "validation_auc";
  return keep_best && sel->best_epoch >= 0 ? sel->best_epoch : job.epochs_done().rbegin()->epoch();
}

// Unix seconds as local time, "-" for 0 (never).
std::string FormatTimestamp(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S",
                          absl::FromUnixNanos(static_cast<int64_t>(unix_seconds * 1e9)),
                          absl::LocalTimeZone());
}

// Position inside the current epoch (clamped), from the global step count.
int64_t StepInEpoch(const pb::JobInfo& job) {
  const int64_t spe = job.steps_per_epoch();
  if (spe <= 0) return 0;
  return std::clamp<int64_t>(job.global_step() - job.epoch() * spe, 0, spe);
}

// The kept model's test AUC (-1 before any epoch).
double KeptTestAuc(const pb::JobInfo& job) {
  ModelSelection sel;
  const int64_t kept = KeptEpoch(job, &sel);
  for (const pb::EpochResult& e : job.epochs_done()) {
    if (e.epoch() == kept) return e.test_auc();
  }
  return -1;
}

std::string EpochTable(const pb::JobInfo& job) {
  const bool validation = !job.epochs_done().empty() && job.epochs_done().begin()->has_validation();
  std::string out = absl::StrFormat("  %-6s %-10s %-10s %s%-10s %-10s %-12s %s\n", "epoch",
                                    "train_auc", "train_loss", validation ? "valid_auc  " : "",
                                    "test_auc", "test_loss", "samples/s", "train_s");
  for (const pb::EpochResult& e : job.epochs_done()) {
    const std::string valid =
        validation ? absl::StrFormat("%-10s ", FormatAuc(e.validation_auc())) : "";
    absl::StrAppendFormat(&out, "  %-6d %-10s %-10.4f %s%-10s %-10.4f %-12s %.1f\n", e.epoch() + 1,
                          FormatAuc(e.train_auc()), e.train_loss(), valid, FormatAuc(e.test_auc()),
                          e.test_loss(), GroupThousands(e.samples_per_second()), e.train_time_s());
  }
  return out;
}

std::string ProgressText(const pb::JobInfo& job) {
  std::string s = absl::StrCat("epoch ", job.epoch() + 1, "/", job.epochs());
  if (job.steps_per_epoch() > 0) {
    absl::StrAppend(&s, " step ", StepInEpoch(job), "/", job.steps_per_epoch());
  }
  return s;
}

}  // namespace

std::string GroupThousands(double value) {
  if (!std::isfinite(value)) return "-";
  const bool negative = value < 0;
  std::string digits = absl::StrCat(static_cast<int64_t>(std::llround(std::fabs(value))));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return negative ? "-" + out : out;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t s = std::llround(seconds);
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string FormatAuc(double auc) {
  if (!std::isfinite(auc) || auc < 0) return "-";
  return absl::StrFormat("%.4f", auc);
}

nlohmann::json JobToJson(const pb::JobInfo& job) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const pb::EpochResult& e : job.epochs_done()) epochs.push_back(EpochToJson(e));
  const pb::CheckpointRef& c = job.last_checkpoint();
  return {
      {"apiVersion", kApiVersion},
      {"kind", "Job"},
      {"job_id", job.job_id()},
      {"name", job.name()},
      {"owner", job.owner()},
      {"state", JobStateName(job.state())},
      {"finished", coordinator::IsFinished(job.state())},
      {"message", job.message()},
      {"generation", job.generation()},
      {"recoveries", job.recoveries()},
      {"epoch", job.epoch()},
      {"epochs", job.epochs()},
      {"global_step", job.global_step()},
      {"steps_per_epoch", job.steps_per_epoch()},
      {"samples_total", job.samples_total()},
      {"samples_per_second", job.samples_per_second()},
      {"last_loss", job.last_loss()},
      {"epochs_done", epochs},
      {"last_checkpoint",
       {{"dir", c.dir()},
        {"epochs_done", c.epochs_done()},
        {"global_step", c.global_step()},
        {"generation", c.generation()}}},
      {"oracle_test_auc", job.oracle_test_auc()},
      {"submit_time", job.submit_time()},
      {"start_time", job.start_time()},
      {"end_time", job.end_time()},
      {"time_to_train_s", job.time_to_train_s()},
      {"workers", std::vector<std::string>(job.workers().begin(), job.workers().end())},
      {"servers", std::vector<std::string>(job.servers().begin(), job.servers().end())},
      {"spec_yaml", job.spec_yaml()},
  };
}

nlohmann::json JobListToJson(const std::vector<pb::JobInfo>& jobs) {
  nlohmann::json items = nlohmann::json::array();
  for (const pb::JobInfo& j : jobs) items.push_back(JobToJson(j));
  return {{"apiVersion", kApiVersion}, {"kind", "JobList"}, {"items", items}};
}

std::string FormatJobStatus(const pb::JobInfo& job) {
  std::string out = absl::StrCat("job ", job.job_id());
  if (!job.name().empty()) absl::StrAppend(&out, " (", job.name(), ")");
  absl::StrAppend(&out, ": ", JobStateName(job.state()));
  if (!job.message().empty()) absl::StrAppend(&out, " - ", job.message());
  absl::StrAppend(&out, "\n  generation ", job.generation(), ", recoveries ", job.recoveries(),
                  "\n");
  absl::StrAppend(&out, "  progress:   ", ProgressText(job), ", ",
                  GroupThousands(static_cast<double>(job.samples_total())), " samples trained");
  if (job.samples_per_second() > 0 && !coordinator::IsFinished(job.state())) {
    absl::StrAppend(&out, ", ", GroupThousands(job.samples_per_second()), " samples/s");
  }
  if (job.global_step() > 0) absl::StrAppendFormat(&out, ", loss %.4f", job.last_loss());
  absl::StrAppend(&out, "\n  submitted:  ", FormatTimestamp(job.submit_time()), ", started ",
                  FormatTimestamp(job.start_time()), ", finished ", FormatTimestamp(job.end_time()),
                  "\n");
  if (job.time_to_train_s() > 0) {
    absl::StrAppendFormat(&out, "  time to train %.1f s\n", job.time_to_train_s());
  }
  if (!job.workers().empty()) {
    absl::StrAppend(&out, "  workers:    ", absl::StrJoin(job.workers(), ", "), "\n");
  }
  if (!job.servers().empty()) {
    absl::StrAppend(&out, "  servers:    ", absl::StrJoin(job.servers(), ", "), "\n");
  }
  if (!job.epochs_done().empty()) {
    absl::StrAppend(&out, EpochTable(job));
    if (job.oracle_test_auc() > 0) {
      absl::StrAppendFormat(&out,
                            "  oracle test AUC %.4f (the kept model's test AUC / oracle = %.4f)\n",
                            job.oracle_test_auc(), KeptTestAuc(job) / job.oracle_test_auc());
    }
  }
  const pb::CheckpointRef& c = job.last_checkpoint();
  if (!c.dir().empty()) {
    absl::StrAppend(&out, "  last checkpoint: ", c.dir(), " (", c.epochs_done(),
                    " epochs done, global step ", c.global_step(), ", generation ", c.generation(),
                    ")\n");
  } else {
    absl::StrAppend(&out, "  last checkpoint: none\n");
  }
  return out;
}

std::string FormatJobTable(const std::vector<pb::JobInfo>& jobs) {
  std::string out = absl::StrFormat("%-16s %-16s %-14s %-8s %-9s %s\n", "JOB", "NAME", "STATE",
                                    "EPOCH", "TEST_AUC", "SUBMITTED");
  for (const pb::JobInfo& j : jobs) {
    const std::string epoch =
        j.epochs() > 0 ? absl::StrCat(std::min(j.epoch() + 1, j.epochs()), "/", j.epochs()) : "-";
    absl::StrAppendFormat(&out, "%-16s %-16s %-14s %-8s %-9s %s\n", j.job_id(),
                          j.name().empty() ? "-" : j.name(), JobStateName(j.state()), epoch,
                          FormatAuc(KeptTestAuc(j)), FormatTimestamp(j.submit_time()));
  }
  return out;
}

std::string DllLogPath(const pb::JobInfo& job) {
  if (job.results_dir().empty()) return "";
  return JoinPath(job.results_dir(), "log.json");
}

std::string FormatFinalReport(const pb::JobInfo& job) {
  std::string out = absl::StrCat("job ", job.job_id(), " ", JobStateName(job.state()));
  if (!job.message().empty()) absl::StrAppend(&out, ": ", job.message());
  absl::StrAppend(&out, " (", job.epochs_done().size(), " of ", job.epochs(),
                  " epochs, generation ", job.generation(), ", ", job.recoveries(),
                  job.recoveries() == 1 ? " recovery" : " recoveries", ")\n");
  if (!job.epochs_done().empty()) absl::StrAppend(&out, EpochTable(job));
  const double test_auc = KeptTestAuc(job);
  absl::StrAppend(&out, "  test AUC   ", FormatAuc(test_auc));
  if (job.oracle_test_auc() > 0) {
    absl::StrAppend(&out, "   oracle AUC ", FormatAuc(job.oracle_test_auc()));
    if (test_auc >= 0) {
      absl::StrAppendFormat(&out, "   ratio %.4f", test_auc / job.oracle_test_auc());
    }
  }
  absl::StrAppend(&out, "\n");
  ModelSelection sel;
  const int64_t kept = KeptEpoch(job, &sel);
  if (sel.best_epoch >= 0) {
    absl::StrAppendFormat(&out, "  kept model  epoch %d (%s)\n", kept + 1,
                          kept == sel.best_epoch ? absl::StrCat("best validation AUC ",
                                                                FormatAuc(sel.best_validation_auc))
                                                 : std::string("the last; keep_best: last"));
  }
  const double rate = job.time_to_train_s() > 0
                          ? static_cast<double>(job.samples_total()) / job.time_to_train_s()
                          : 0.0;
  absl::StrAppendFormat(&out, "  time to train %.1f s   %s samples/s   %s samples\n",
                        job.time_to_train_s(), GroupThousands(rate),
                        GroupThousands(static_cast<double>(job.samples_total())));
  const std::string log = DllLogPath(job);
  absl::StrAppend(&out, "  DLLL log   ", log.empty() ? "none (the spec has no results_dir)" : log,
                  "\n");
  return out;
}

// ---------------------------------------------------------------------------------------------

std::string JobProgress::LiveLine(const pb::JobInfo& job) {
  if (job.state() != pb::RUNNING && job.state() != pb::CHECKPOINTING) {
    std::string s = JobStateName(job.state());
    if (!job.message().empty()) absl::StrAppend(&s, ": ", job.message());
    return s;
  }
  std::string s = ProgressText(job);
  if (job.state() == pb::CHECKPOINTING) absl::StrAppend(&s, " (checkpointing)");
  if (job.samples_per_second() > 0) {
    absl::StrAppend(&s, " | ", GroupThousands(job.samples_per_second()), " samples/s");
    const int64_t spe = job.steps_per_epoch();
    if (spe > 0 && batch_size_ > 0) {
      const int64_t remaining =
          std::max<int64_t>(0, (job.epochs() - job.epoch()) * spe - StepInEpoch(job));
      absl::StrAppend(
          &s, " | ETA ",
          FormatDuration(static_cast<double>(remaining * batch_size_) / job.samples_per_second()));
    }
  }
  const double auc = job.epochs_done().empty() ? -1 : job.epochs_done().rbegin()->test_auc();
  if (auc >= 0) absl::StrAppend(&s, " | last test AUC ", FormatAuc(auc));
  return s;
}

void JobProgress::ClearLive() {
  if (live_shown_) {
    std::fputs("\r\033[K", out_);
    live_shown_ = false;
  }
}

void JobProgress::Note(const std::string& line) {
  ClearLive();
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void JobProgress::Finish() {
  ClearLive();
  std::fflush(out_);
}

void JobProgress::Update(const pb::JobInfo& job) {
  if (batch_size_ == 0) {
    StatusOr<JobSpec> spec = ParseJobSpec(job.spec_yaml(), "job spec");
    if (spec.ok()) batch_size_ = spec->training.batch_size;
  }
  // A recovery from an earlier checkpoint may drop epochs: print them again when redone.
  epochs_printed_ = std::min<int>(epochs_printed_, job.epochs_done_size());
  for (; epochs_printed_ < job.epochs_done_size(); ++epochs_printed_) {
    const pb::EpochResult& e = job.epochs_done(epochs_printed_);
    Note(absl::StrFormat(
        "epoch %d/%d: train AUC %s loss %.4f | test AUC %s loss %.4f | %s samples/s | %.1f s",
        e.epoch() + 1, job.epochs(), FormatAuc(e.train_auc()), e.train_loss(),
        FormatAuc(e.test_auc()), e.test_loss(), GroupThousands(e.samples_per_second()),
        e.train_time_s()));
  }
  if (job.state() != last_state_ || job.message() != last_message_ ||
      job.generation() != last_generation_) {
    std::string line = absl::StrCat("job ", job.job_id(), ": ", JobStateName(job.state()));
    if (job.generation() > 0) absl::StrAppend(&line, " (generation ", job.generation(), ")");
    if (!job.message().empty()) absl::StrAppend(&line, " - ", job.message());
    Note(line);
    last_state_ = job.state();
    last_message_ = job.message();
    last_generation_ = job.generation();
  }
  if (live_ && !coordinator::IsFinished(job.state())) {
    std::fprintf(out_, "\r\033[K%s", LiveLine(job).c_str());
    live_shown_ = true;
    std::fflush(out_);
  }
}

}  // namespace sift::cli
