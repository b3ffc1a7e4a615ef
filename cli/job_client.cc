#include "cli/job_client.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/exit_code.h"

namespace sift::cli {
namespace {

constexpr char kStartHint[] =
    "start one with `sift coordinator --port PORT --state-dir DIR`, or point to a running one "
    "with --coordinator host:port or $SIFT_COORDINATOR";

bool IsConnectionError(const Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

StatusOr<std::unique_ptr<coordinator::CoordinatorClient>> ConnectCoordinator(
    const std::string& flag_address, absl::Duration connect_timeout,
    const SecurityOptions& security) {
  coordinator::CoordinatorClientOptions o;
  o.address = coordinator::ResolveCoordinatorAddress(flag_address);
  o.connect_timeout = connect_timeout;
  o.security = security;
  auto client = coordinator::CoordinatorClient::Connect(o);
  if (!client.ok()) {
    const Status& s = client.status();
    if (IsConnectionError(s)) {
      return WithExitCode(absl::UnavailableError(absl::StrCat(
                              "no coordinator at ", o.address, " (waited ",
                              absl::FormatDuration(connect_timeout), "): ", kStartHint)),
                          kExitUsage);
    }
    return WithExitCode(s, kExitUsage);
  }
  return client;
}

Status CoordinatorCallError(const Status& s) {
  if (s.ok()) return s;
  if (IsConnectionError(s)) {
    return WithExitCode(Status(s.code(), absl::StrCat(s.message(), "; ", kStartHint)), kExitUsage);
  }
  if (s.code() == absl::StatusCode::kNotFound || s.code() == absl::StatusCode::kInvalidArgument ||
      s.code() == absl::StatusCode::kUnauthenticated ||
      s.code() == absl::StatusCode::kPermissionDenied) {
    return WithExitCode(s, kExitUsage);
  }
  return WithExitCode(s, kExitFailed);
}

Status JobOutcome(const coordinator::pb::JobInfo& job) {
  if (job.state() == coordinator::pb::COMPLETED) return absl::OkStatus();
  return WithExitCode(absl::AbortedError(absl::StrCat(
                          "job ", job.job_id(), " ", coordinator::JobStateName(job.state()),
                          job.message().empty() ? "" : ": ", job.message())),
                      kExitFailed);
}

std::string AbsolutePath(const std::string& path, const std::string& base_dir) {
  if (path.empty()) return path;
  std::filesystem::path p(path);
  if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
  std::string out = p.lexically_normal().string();
  // "dir/" and "dir" name the same directory; keep the plain form.
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

void MakeSpecPathsAbsolute(JobSpec* spec, const std::string& base_dir) {
  spec->dataset = AbsolutePath(spec->dataset, base_dir);
  // The directories the job writes or resumes from, with this machine's symbolic links resolved:
  // the coordinator follows none below its roots.
  for (std::string* dir :
       {&spec->checkpoint.dir, &spec->checkpoint.resume_from, &spec->results_dir}) {
    *dir = AbsolutePath(*dir, base_dir);
    std::error_code ec;
    if (!dir->empty()) {
      const std::filesystem::path real = std::filesystem::weakly_canonical(*dir, ec);
      if (!ec) *dir = real.string();
    }
  }
  spec->security.tls_dir = AbsolutePath(spec->security.tls_dir, base_dir);
  spec->security.token_file = AbsolutePath(spec->security.token_file, base_dir);
}

std::string CurrentDirectory() {
  std::error_code ec;
  std::filesystem::path cwd = std::filesystem::current_path(ec);
  return ec ? std::string(".") : cwd.string();
}

StatusOr<JobSpec> LoadJobSpecForSubmit(const std::string& path) {
  StatusOr<JobSpec> spec = ReadJobSpec(path);
  if (!spec.ok()) return WithExitCode(spec.status(), kExitUsage);
  MakeSpecPathsAbsolute(&*spec, CurrentDirectory());
  return spec;
}

}  // namespace sift::cli
