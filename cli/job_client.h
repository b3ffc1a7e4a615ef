// The CLI side of talking to a coordinator: connecting with errors a user can act on, the exit
// codes of RPC errors, and reading a job spec for submission (validated locally, relative paths
// made absolute, so the coordinator and its workers need not share the submitter's directory).
// Plain functions; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "server/coordinator/client.h"

namespace sift::cli {

// Connects to the coordinator at ResolveCoordinatorAddress(flag_address). Unreachable within
// `connect_timeout`: UNAVAILABLE with exit code 2, naming the address and how to fix it.
// `security`: TLS and the user's token (cli/security_flags.h).
StatusOr<std::unique_ptr<coordinator::CoordinatorClient>> ConnectCoordinator(
    const std::string& flag_address, absl::Duration connect_timeout,
    const SecurityOptions& security = SecurityOptions());

// The exit code of a failed coordinator call: 2 for NOT_FOUND (unknown job), INVALID_ARGUMENT
// (bad spec), UNAUTHENTICATED and PERMISSION_DENIED (credentials), UNAVAILABLE and
// DEADLINE_EXCEEDED (the coordinator is unreachable: the message gets the hint); 1 otherwise (e.g.
// FAILED_PRECONDITION: cancel of a finished job).
Status CoordinatorCallError(const Status& s);

// A finished job as a command's result: OK for COMPLETED; otherwise ABORTED with exit code 1,
// "job <id> <STATE>: <message>".
Status JobOutcome(const coordinator::pb::JobInfo& job);

// `path` relative to `base_dir` (unchanged when absolute or empty), without "." components.
std::string AbsolutePath(const std::string& path, const std::string& base_dir);
// dataset, checkpoint.dir and results_dir made absolute against `base_dir` (the directories with
// their symbolic links resolved on this machine).
void MakeSpecPathsAbsolute(JobSpec* spec, const std::string& base_dir);
// The current working directory ("." when it cannot be read).
std::string CurrentDirectory();

// ReadJobSpec(path) with paths made absolute against the current directory. Errors (missing
// file, "job.yaml:3: training.lr: ...") carry exit code 2.
StatusOr<JobSpec> LoadJobSpecForSubmit(const std::string& path);

}  // namespace sift::cli
