// sift submit / status / jobs / cancel / logs: the client commands of a coordinator
// (proto/coordinator.proto). Flags -> a CoordinatorClient call -> text (cli/job_view.h) or the
// stable JSON schema (--output json). Exit codes: see kExitCodesFooter.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#include "cli/job_client.h"
#include "cli/job_view.h"
#include "cli/security_flags.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "worker/checkpoint.h"

namespace sift::cli {
namespace {

constexpr char kExitCodesFooter[] =
    "Exit codes: 0 ok; 1 the job failed or was cancelled (submit --wait), or the operation "
    "failed (e.g. cancel of a finished job); 2 usage error, bad job spec, unknown job, or no "
    "coordinator reachable at the address. `sift status` exits 0 whenever it could show the job, "
    "whatever its state.\nCoordinator address: --coordinator, else $SIFT_COORDINATOR, else "
    "127.0.0.1:7070.";

struct ClientFlags {
  std::string coordinator;
  std::string output = "text";
  double connect_timeout_s = 5;
  SecurityOptions security;

  bool json() const { return output == "json"; }
  StatusOr<std::unique_ptr<coordinator::CoordinatorClient>> Connect() const {
    return ConnectCoordinator(coordinator, absl::Seconds(connect_timeout_s), security);
  }
};

void AddClientFlags(CLI::App* cmd, ClientFlags* f) {
  cmd->add_option("--coordinator", f->coordinator,
                  "Coordinator host:port (default: $SIFT_COORDINATOR, else 127.0.0.1:7070)");
  cmd->add_option("--output,-o", f->output, "Output format: text or json (a stable schema)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--connect-timeout", f->connect_timeout_s,
                  "Seconds to wait for the coordinator to answer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  AddSecurityFlags(cmd, &f->security, SecurityFlagsFor::kClient);
  cmd->footer(kExitCodesFooter);
}

void PrintJson(const nlohmann::json& j) { std::printf("%s\n", j.dump(2).c_str()); }

// GetJob, tolerating a coordinator that is briefly away (a restart) for up to a minute.
class JobPoller {
 public:
  JobPoller(coordinator::CoordinatorClient* client, std::string job_id)
      : client_(client), job_id_(std::move(job_id)) {}
  StatusOr<pb::JobInfo> Next() {
    while (true) {
      StatusOr<pb::JobInfo> job = client_->GetJob(job_id_);
      if (job.ok()) {
        failing_since_ = absl::InfiniteFuture();
        return job;
      }
      const Status& s = job.status();
      const bool transient = s.code() == absl::StatusCode::kUnavailable ||
                             s.code() == absl::StatusCode::kDeadlineExceeded;
      const absl::Time now = absl::Now();
      if (failing_since_ == absl::InfiniteFuture()) failing_since_ = now;
      if (!transient || now - failing_since_ > absl::Minutes(1)) return CoordinatorCallError(s);
      absl::SleepFor(absl::Seconds(1));
    }
  }

 private:
  coordinator::CoordinatorClient* client_;
  std::string job_id_;
  absl::Time failing_since_ = absl::InfiniteFuture();
};

// ---- submit ----------------------------------------------------------------------------------

struct SubmitFlags {
  ClientFlags client;
  std::string spec_path;
  std::string name;
  std::string resume_from;
  bool wait = false;
  bool dry_run = false;
};

Status RunSubmit(const SubmitFlags& f) {
  SIFT_ASSIGN_OR_RETURN(JobSpec spec, LoadJobSpecForSubmit(f.spec_path));
  if (!f.name.empty()) spec.name = f.name;
  if (!f.resume_from.empty()) {
    spec.checkpoint.resume_from = AbsolutePath(f.resume_from, CurrentDirectory());
  }
  if (!spec.checkpoint.resume_from.empty()) {
    // A job's directory means its newest complete checkpoint (step-<N>/).
    spec.checkpoint.resume_from = worker::ResolveCheckpointDir(spec.checkpoint.resume_from);
    if (!PathExists(JoinPath(spec.checkpoint.resume_from, "manifest.json"))) {
      return WithExitCode(absl::NotFoundError(absl::StrCat(
                              "checkpoint.resume_from ", spec.checkpoint.resume_from,
                              ": not a checkpoint (no manifest.json) nor a job's checkpoint "
                              "directory (no step-<N>/manifest.json)")),
                          kExitUsage);
    }
  }
  if (Status s = CheckClusterJob(spec, f.spec_path); !s.ok()) return WithExitCode(s, kExitUsage);
  if (f.dry_run) {  // validated: show what would be submitted, contact no one
    // What this machine can see is checked too: a dataset missing from a directory that is here
    // is a typo; one whose directory is not here either is on the cluster's file system.
    if (!PathExists(spec.dataset)) {
      const std::string parent = std::filesystem::path(spec.dataset).parent_path().string();
      if (PathExists(parent)) {
        return WithExitCode(absl::NotFoundError(absl::StrCat(f.spec_path, ": dataset ",
                                                             spec.dataset, " does not exist")),
                            kExitUsage);
      }
      std::fprintf(stderr,
                   "sift submit: note: dataset %s is not on this machine (nor %s): not checked\n",
                   spec.dataset.c_str(), parent.c_str());
    }
    if (f.client.json()) {
      PrintJson({{"apiVersion", kApiVersion}, {"kind", "JobSpec"}, {"spec", JobSpecToYaml(spec)}});
    } else {
      std::printf("%s", JobSpecToYaml(spec).c_str());
    }
    return absl::OkStatus();
  }
  // The spec's security block fills in what neither a flag nor the environment gave.
  ClientFlags client_flags = f.client;
  if (client_flags.security.tls_dir.empty()) client_flags.security.tls_dir = spec.security.tls_dir;
  if (client_flags.security.token_file.empty()) {
    client_flags.security.token_file = spec.security.token_file;
  }
  SIFT_ASSIGN_OR_RETURN(auto client, client_flags.Connect());
  StatusOr<std::string> id = client->SubmitJob(JobSpecToYaml(spec), f.spec_path);
  if (!id.ok()) return CoordinatorCallError(id.status());
  if (!f.wait) {
    if (f.client.json()) {
      PrintJson({{"apiVersion", kApiVersion}, {"kind", "Submission"}, {"job_id", *id}});
    } else {
      std::printf("%s\n", id->c_str());
    }
    return absl::OkStatus();
  }
  // --wait: text follows the job on stdout; json prints the finished Job object only.
  if (!f.client.json()) {
    std::printf("%s\n", id->c_str());
    std::fflush(stdout);
  }
  JobProgress progress(stdout, !f.client.json() && ::isatty(STDOUT_FILENO) != 0);
  JobPoller poller(client.get(), *id);
  while (true) {
    SIFT_ASSIGN_OR_RETURN(pb::JobInfo job, poller.Next());
    if (!f.client.json()) progress.Update(job);
    if (coordinator::IsFinished(job.state())) {
      progress.Finish();
      if (f.client.json()) {
        PrintJson(JobToJson(job));
      } else {
        std::printf("%s", FormatFinalReport(job).c_str());
      }
      std::fflush(stdout);
      return JobOutcome(job);
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
}

// ---- status / jobs / cancel ------------------------------------------------------------------

struct JobFlags {
  ClientFlags client;
  std::string job_id;
};

Status RunStatus(const JobFlags& f) {
  SIFT_ASSIGN_OR_RETURN(auto client, f.client.Connect());
  StatusOr<pb::JobInfo> job = client->GetJob(f.job_id);
  if (!job.ok()) return CoordinatorCallError(job.status());
  if (f.client.json()) {
    PrintJson(JobToJson(*job));
  } else {
    std::printf("%s", FormatJobStatus(*job).c_str());
  }
  return absl::OkStatus();
}

Status RunJobs(const ClientFlags& f) {
  SIFT_ASSIGN_OR_RETURN(auto client, f.Connect());
  StatusOr<std::vector<pb::JobInfo>> jobs = client->ListJobs();
  if (!jobs.ok()) return CoordinatorCallError(jobs.status());
  if (f.json()) {
    PrintJson(JobListToJson(*jobs));
  } else {
    std::printf("%s", FormatJobTable(*jobs).c_str());
  }
  return absl::OkStatus();
}

Status RunCancel(const JobFlags& f) {
  SIFT_ASSIGN_OR_RETURN(auto client, f.client.Connect());
  StatusOr<pb::JobInfo> job = client->CancelJob(f.job_id);
  if (!job.ok()) return CoordinatorCallError(job.status());
  if (f.client.json()) {
    PrintJson(JobToJson(*job));
  } else {
    std::printf("job %s: %s\n", job->job_id().c_str(),
                coordinator::JobStateName(job->state()).c_str());
  }
  return absl::OkStatus();
}

// ---- logs ------------------------------------------------------------------------------------

struct LogsFlags {
  JobFlags job;
  bool follow = false;
};

Status RunLogs(const LogsFlags& f) {
  const ClientFlags& c = f.job.client;
  SIFT_ASSIGN_OR_RETURN(auto client, c.Connect());
  int64_t offset = 0;
  absl::Time failing_since = absl::InfiniteFuture();
  // Without --follow, every line there is now: the coordinator answers in pages, so pages are
  // fetched until one comes back empty (json: one object with all of them at the end).
  std::vector<std::string> json_lines;
  while (true) {
    StatusOr<pb::GetLogsResponse> r = client->GetLogs(f.job.job_id, offset);
    if (!r.ok()) {
      // --follow rides out a brief coordinator restart, like submit --wait.
      const bool transient = r.status().code() == absl::StatusCode::kUnavailable;
      if (failing_since == absl::InfiniteFuture()) failing_since = absl::Now();
      if (!f.follow || !transient || absl::Now() - failing_since > absl::Minutes(1)) {
        return CoordinatorCallError(r.status());
      }
      absl::SleepFor(absl::Seconds(1));
      continue;
    }
    failing_since = absl::InfiniteFuture();
    const bool page_empty = r->lines().empty();
    if (c.json() && !f.follow) {
      json_lines.insert(json_lines.end(), r->lines().begin(), r->lines().end());
      if (!page_empty && !r->finished()) {
        offset = r->next_offset();
        continue;
      }
      PrintJson({{"apiVersion", kApiVersion},
                 {"kind", "JobLogs"},
                 {"job_id", f.job.job_id},
                 {"lines", json_lines},
                 {"next_offset", r->next_offset()},
                 {"finished", r->finished()},
                 {"state", coordinator::JobStateName(r->state())}});
      return absl::OkStatus();
    }
    int64_t index = offset;
    for (const std::string& line : r->lines()) {
      if (c.json()) {  // --follow: JSON Lines, one object per log line
        std::printf("%s\n", nlohmann::json({{"apiVersion", kApiVersion},
                                            {"kind", "JobLogLine"},
                                            {"job_id", f.job.job_id},
                                            {"offset", index},
                                            {"line", line}})
                                .dump()
                                .c_str());
      } else {
        std::printf("%s\n", line.c_str());
      }
      ++index;
    }
    std::fflush(stdout);
    offset = r->next_offset();
    if (r->finished() || (!f.follow && page_empty)) return absl::OkStatus();
    // A full backlog is read at once; new lines are polled for.
    if (page_empty) absl::SleepFor(absl::Milliseconds(500));
  }
}

}  // namespace

void AddSubmit(CLI::App* app, Action* action) {
  auto f = std::make_shared<SubmitFlags>();
  CLI::App* cmd = app->add_subcommand(
      "submit", "Submit a job spec (YAML) to the coordinator; prints the job id");
  cmd->add_option("JOB.yaml", f->spec_path,
                  "The job spec; its relative paths (dataset, checkpoint.dir, results_dir) are "
                  "resolved against the current directory")
      ->required();
  cmd->add_option("--name", f->name, "Job name (overrides the spec's name)");
  cmd->add_option("--resume-from", f->resume_from,
                  "Start from this checkpoint: a step-<N>/ directory, or a job's checkpoint "
                  "directory (its newest complete one), e.g. a failed job's; overrides "
                  "checkpoint.resume_from; the new job writes its own checkpoints");
  cmd->add_flag("--wait", f->wait,
                "Follow the job until it finishes (progress, then the final table); the exit "
                "code is the job's: 0 COMPLETED, 1 FAILED or CANCELLED");
  cmd->add_flag("--dry-run", f->dry_run,
                "Validate the spec locally and print it as it would be submitted (relative "
                "paths made absolute), without contacting a coordinator; exit 0 valid, 2 not")
      ->excludes("--wait");
  AddClientFlags(cmd, &f->client);
  cmd->callback([f, action] { *action = [f] { return RunSubmit(*f); }; });
}

void AddStatus(CLI::App* app, Action* action) {
  auto f = std::make_shared<JobFlags>();
  CLI::App* cmd = app->add_subcommand(
      "status", "Show one job: state, progress, per-epoch AUC, last checkpoint");
  cmd->add_option("JOB", f->job_id, "Job id (default: the most recently submitted job)");
  AddClientFlags(cmd, &f->client);
  cmd->callback([f, action] { *action = [f] { return RunStatus(*f); }; });
}

void AddJobs(CLI::App* app, Action* action) {
  auto f = std::make_shared<ClientFlags>();
  CLI::App* cmd = app->add_subcommand("jobs", "List the coordinator's jobs in submission order");
  AddClientFlags(cmd, f.get());
  cmd->callback([f, action] { *action = [f] { return RunJobs(*f); }; });
}

void AddCancel(CLI::App* app, Action* action) {
  auto f = std::make_shared<JobFlags>();
  CLI::App* cmd =
      app->add_subcommand("cancel", "Cancel a pending or running job; prints its new state");
  cmd->add_option("JOB", f->job_id, "Job id")->required();
  AddClientFlags(cmd, &f->client);
  cmd->callback([f, action] { *action = [f] { return RunCancel(*f); }; });
}

void AddLogs(CLI::App* app, Action* action) {
  auto f = std::make_shared<LogsFlags>();
  CLI::App* cmd =
      app->add_subcommand("logs", "Print a job's log lines (--follow: until the job finishes)");
  cmd->add_option("JOB", f->job.job_id, "Job id")->required();
  cmd->add_flag("--follow,-f", f->follow,
                "Keep printing new lines until the job finishes (with --output json: one JSON "
                "object per line)");
  AddClientFlags(cmd, &f->job.client);
  cmd->callback([f, action] { *action = [f] { return RunLogs(*f); }; });
}

}  // namespace sift::cli
