// JobStore: the coordinator's durable state under --state-dir:
//   jobs/<job-id>.json  one JobRecord per job (JSON), replaced atomically (WriteFileAtomic) on
//                       every change that matters
//   jobs/<job-id>.log   the job's log, one event per line, appended (never rewritten)
//   next_job_id         the number of the next job ("7" -> "job-7"), replaced atomically
// Open loads everything back; a record that cannot be read (bad JSON, a missing or mistyped
// field, a file name that does not match its job id) is an error naming the file, which stops the
// coordinator from starting rather than losing a job silently. Not thread-safe: the Coordinator
// calls it under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/dir_lock.h"
#include "common/status.h"
#include "proto/coordinator.pb.h"

namespace sift::coordinator {

namespace pb = ::sift::coordinator::v1;

// Rank 0's perf summary of one epoch's training (ReportProgress epoch_end), kept until (and
// after) the epoch's evaluation is in; its metrics open the epoch's DLLL record.
struct EpochPerf {
  std::vector<std::pair<std::string, double>> metrics;  // DLLL order
  double train_time_s = 0;
  bool operator==(const EpochPerf&) const = default;
};

// Everything the coordinator must not lose about one job.
struct JobRecord {
  pb::JobInfo info;  // what GetJob shows (workers/servers: those of the latest generation)
  bool dll_metadata_written = false;        // the DLLL METADATA lines are in results_dir/log.json
  int64_t steps_total = 0;                  // step records received, all generations
  std::map<int64_t, EpochPerf> epoch_perf;  // by 0-based epoch
};

// The record as JSON (non-finite doubles as the strings "NaN", "Infinity", "-Infinity").
std::string JobRecordToJson(const JobRecord& record);
// Parses JobRecordToJson's output. INVALID_ARGUMENT naming `filename` and the bad field.
StatusOr<JobRecord> JobRecordFromJson(absl::string_view text, const std::string& filename);

// "job-12" -> 12; -1 when `job_id` is not of that form.
int64_t JobNumber(absl::string_view job_id);

class JobStore {
 public:
  struct Loaded {
    std::vector<JobRecord> jobs;                 // by job number (= submission order)
    std::vector<std::vector<std::string>> logs;  // logs[i] belongs to jobs[i]
    int64_t next_job_number = 1;
  };

  // Creates <state_dir>/jobs when missing and loads every record and log into *loaded.
  static StatusOr<std::unique_ptr<JobStore>> Open(const std::string& state_dir, Loaded* loaded);

  Status Save(const JobRecord& record);
  Status AppendLog(const std::string& job_id, absl::string_view line);
  Status SaveNextJobNumber(int64_t next);

  const std::string& state_dir() const { return state_dir_; }
  std::string RecordPath(const std::string& job_id) const;
  std::string LogPath(const std::string& job_id) const;

 private:
  JobStore(std::string state_dir, DirLock lock)
      : state_dir_(std::move(state_dir)), lock_(std::move(lock)) {}
  std::string state_dir_;
  DirLock lock_;  // one coordinator per state directory
};

}  // namespace sift::coordinator
