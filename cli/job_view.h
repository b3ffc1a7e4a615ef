// How the job commands and `sift local` show a job: the stable JSON schema of --output json
// ({"apiVersion": "sift/v1", "kind": "Job", ...}, snake_case fields mirroring JobInfo, epochs
// 0-based as in the proto), the human text of `sift status` and `sift jobs`, the final table, and
// JobProgress (state changes, finished epochs, and on a terminal one live line). Human text
// numbers epochs from 1. Formatting functions are pure and thread-safe; JobProgress is not.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/coordinator/client.h"

namespace sift::cli {

namespace pb = ::sift::coordinator::v1;

inline constexpr char kApiVersion[] = "sift/v1";

nlohmann::json JobToJson(const pb::JobInfo& job);                    // kind "Job"
nlohmann::json JobListToJson(const std::vector<pb::JobInfo>& jobs);  // kind "JobList", "items"

// "8,512"; "1m10s" / "42s" / "2h03m"; "0.8226" or "-" for a missing (negative/NaN) AUC.
std::string GroupThousands(double value);
std::string FormatDuration(double seconds);
std::string FormatAuc(double auc);

// `sift status`: state, message, generation, progress, throughput, epoch table, checkpoint.
std::string FormatJobStatus(const pb::JobInfo& job);
// `sift jobs`: one row per job (id, name, state, epoch, test AUC, submitted).
std::string FormatJobTable(const std::vector<pb::JobInfo>& jobs);
// The per-epoch table, then test AUC / oracle / ratio, time to train, samples/s, and where the
// DLLL log is (from the spec's results_dir).
std::string FormatFinalReport(const pb::JobInfo& job);
// "<JobInfo.results_dir>/log.json" (the spec's results_dir/<job id>), or "" when the job has no
// results_dir.
std::string DllLogPath(const pb::JobInfo& job);

// Follows a job through successive GetJob answers. Prints one line per state change and per
// finished epoch; with `live`, also a progress line rewritten in place (\r):
//   "epoch 2/3 step 40/97 | 8,512 samples/s | ETA 1m10s | last test AUC 0.8226".
class JobProgress {
 public:
  JobProgress(std::FILE* out, bool live) : out_(out), live_(live) {}
  void Update(const pb::JobInfo& job);
  // A line of its own (e.g. "worker 0 exited ...; restarting"), keeping the live line intact.
  void Note(const std::string& line);
  // Ends the live line (call before printing anything else).
  void Finish();

 private:
  void ClearLive();
  std::string LiveLine(const pb::JobInfo& job);

  std::FILE* out_;
  bool live_;
  bool live_shown_ = false;
  pb::JobState last_state_ = pb::JOB_STATE_UNSPECIFIED;
  std::string last_message_;
  int64_t last_generation_ = -1;
  int epochs_printed_ = 0;
  int64_t batch_size_ = 0;  // from the spec, for the ETA (0 = unknown)
};

}  // namespace sift::cli
