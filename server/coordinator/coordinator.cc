#include "server/coordinator/coordinator.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/auc.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/model_selection.h"
#include "common/text.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/client.h"

namespace sift::coordinator {
namespace {

constexpr int64_t kMaxKvWaitMs = 10000;
constexpr int64_t kMaxLogLinesPerCall = 10000;
// Evaluation splits, in ReportEval's index order; validation only with
// training.validation_fraction > 0 (NumEvalSplits).
const char* const kSplitNames[3] = {"train", "test", "validation"};
constexpr int kValidationSplit = 2;
int NumEvalSplits(const JobSpec& spec) { return spec.training.validation_fraction > 0 ? 3 : 2; }

// The model selection of a job's recorded epochs up to `epoch` (common/model_selection.h: the
// rule the trainer applies on every rank to the same predictions).
ModelSelection SelectionThrough(const pb::JobInfo& info, int64_t epoch) {
  ModelSelection sel;
  for (const pb::EpochResult& e : info.epochs_done()) {
    if (e.epoch() <= epoch && e.has_validation()) {
      sel.Update(e.epoch(), e.validation_auc(), e.test_auc(), e.test_loss());
    }
  }
  return sel;
}

bool IsActive(pb::JobState s) {
  return s == pb::PENDING || s == pb::RUNNING || s == pb::CHECKPOINTING || s == pb::RECOVERING;
}
bool IsRunning(pb::JobState s) { return s == pb::RUNNING || s == pb::CHECKPOINTING; }

double UnixSeconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

// Errors of internal transitions that have no caller to return them to (lease expiry, ticks).
void Complain(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "sift coordinator: %s\n", std::string(s.message()).c_str());
    std::fflush(stderr);
  }
}

// A per-start nonce for member ids: ids handed out by an earlier coordinator never match.
std::string MemberIdPrefix() {
  static std::atomic<uint64_t> instances{0};
  const uint64_t nonce = Mix64(static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())) ^
                               (static_cast<uint64_t>(::getpid()) << 40) ^
                               (instances.fetch_add(1) * 0x9E3779B97F4A7C15ull));
  return absl::StrCat("m", absl::Hex(nonce & 0xffffffffffull, absl::kZeroPad10), "-");
}

std::string JobNameFor(const JobSpec& spec, const std::string& source_name) {
  if (!spec.name.empty()) return spec.name;
  std::string base = source_name.substr(source_name.find_last_of('/') + 1);
  for (const char* ext : {".yaml", ".yml"}) {
    if (absl::EndsWith(base, ext)) base.resize(base.size() - std::string(ext).size());
  }
  return base;
}

// Sorted indices as ranges, "0-3, 7, 9-99999", at most 8 of them then "and N more".
std::string RangesText(const std::vector<int>& sorted) {
  std::vector<std::string> parts;
  size_t i = 0;
  int ranges = 0;
  while (i < sorted.size()) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (++ranges > 8) {
      parts.push_back(absl::StrCat("and ", sorted.size() - i, " more"));
      break;
    }
    if (j == i + 1) {  // two: "3, 4"
      parts.push_back(absl::StrCat(sorted[i], ", ", sorted[j]));
    } else {
      parts.push_back(i == j ? absl::StrCat(sorted[i]) : absl::StrCat(sorted[i], "-", sorted[j]));
    }
    i = j + 1;
  }
  return absl::StrJoin(parts, ", ");
}

// The embedding snapshot the checkpoint in `dir` (or its newest step directory) names; "" when
// there is none or the manifest cannot be read (the restore then fails naming the rule).
std::string ManifestSnapshotName(const std::string& dir) {
  for (const std::string& candidate : {dir, std::string()}) {
    std::string manifest_dir = candidate;
    if (manifest_dir.empty()) {
      // A job directory: its newest step-<N> directory with a manifest.
      std::error_code ec;
      std::string best;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (absl::StartsWith(name, "step-") && name > best &&
            PathExists(JoinPath(e.path().string(), "manifest.json"))) {
          best = name;
        }
      }
      if (best.empty()) return "";
      manifest_dir = JoinPath(dir, best);
    }
    StatusOr<std::string> text = ReadFileToString(JoinPath(manifest_dir, "manifest.json"));
    if (!text.ok()) continue;
    const nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!m.is_object()) return "";
    auto snap = m.find("embedding_snapshot");
    if (snap == m.end() || !snap->is_object()) return "";
    auto name = snap->find("name");
    return name != snap->end() && name->is_string() ? name->get<std::string>() : "";
  }
  return "";
}

// The credentials' secret: read from `path` (refused when others may read it), or drawn and
// written there (mode 0600) the first time.
StatusOr<JobCredentialIssuer> LoadOrCreateCredentialKey(const std::string& path) {
  if (PathExists(path)) {
    SIFT_RETURN_IF_ERROR(CheckPrivateFile(path, "the job credentials' key"));
    SIFT_ASSIGN_OR_RETURN(std::string secret, ReadFileToString(path));
    if (secret.size() < 32) {
      return absl::DataLossError(absl::StrCat(path, ": ", secret.size(),
                                              " bytes, not a job credentials' key (32); remove "
                                              "it to draw a new one"));
    }
    return JobCredentialIssuer(std::move(secret));
  }
  SIFT_ASSIGN_OR_RETURN(JobCredentialIssuer issuer, JobCredentialIssuer::Create());
  const std::string tmp = path + ".new";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  const std::string& secret = issuer.secret();
  const bool written =
      ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size()) &&
      ::fsync(fd) == 0;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  return issuer;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)), member_id_prefix_(MemberIdPrefix()) {}

Coordinator::~Coordinator() { Shutdown(); }

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(CoordinatorOptions options) {
  if (options.lease_ms < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--lease-ms ", options.lease_ms, " < 1"));
  }
  if (options.heartbeat_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heartbeat-ms ", options.heartbeat_ms, " < 1"));
  }
  if (options.max_recoveries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-recoveries ", options.max_recoveries, " < 0"));
  }
  if (options.max_servers < 1 || options.max_servers > JobSpecLimits::kMaxClusterSize ||
      options.max_workers < 1 || options.max_workers > JobSpecLimits::kMaxClusterSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-servers and --max-workers must be in [1, ", JobSpecLimits::kMaxClusterSize,
        "], got ", options.max_servers, " and ", options.max_workers));
  }
  if (options.pending_timeout_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pending-timeout-ms ", options.pending_timeout_ms, " < 0"));
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  for (auto [root, name, flag] :
       {std::tuple{&options.results_root, "results", "--results-root"},
        std::tuple{&options.checkpoint_root, "checkpoints", "--checkpoint-root"}}) {
    if (root->empty()) *root = JoinPath(options.state_dir, name);
    SIFT_ASSIGN_OR_RETURN(*root, NormalizedAbsolutePath(*root, flag));
    SIFT_RETURN_IF_ERROR(MakeDirs(*root));
    // The operator's own links (a root under /home -> /gpfs) are resolved once, here: below the
    // root none is followed.
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(*root, ec);
    if (!ec) *root = real.string();
  }
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  JobStore::Loaded loaded;
  SIFT_ASSIGN_OR_RETURN(c->store_, JobStore::Open(c->options_.state_dir, &loaded));
  SIFT_ASSIGN_OR_RETURN(
      JobCredentialIssuer issuer,
      LoadOrCreateCredentialKey(JoinPath(c->options_.state_dir, kCredentialKeyFile)));
  c->credentials_ = std::make_unique<JobCredentialIssuer>(std::move(issuer));

  absl::MutexLock lock(&c->mu_);
  c->next_job_number_ = loaded.next_job_number;
  for (size_t i = 0; i < loaded.jobs.size(); ++i) {
    auto job = std::make_unique<Job>();
    job->rec = std::move(loaded.jobs[i]);
    job->log = std::move(loaded.logs[i]);
    const std::string path = c->store_->RecordPath(job->rec.info.job_id());
    SIFT_ASSIGN_OR_RETURN(job->spec, ParseJobSpec(job->rec.info.spec_yaml(), path));
    if (job->rec.info.results_dir().empty() && !job->spec.results_dir.empty()) {
      // A record written before results directories were per job.
      job->rec.info.set_results_dir(JoinPath(job->spec.results_dir, job->rec.info.job_id()));
    }
    c->jobs_.push_back(std::move(job));
  }
  // Jobs that were running lost their generation with the old coordinator.
  for (auto& job : c->jobs_) {
    const pb::JobState s = job->rec.info.state();
    if (s == pb::RUNNING || s == pb::CHECKPOINTING || s == pb::RECOVERING) {
      job->rec.info.set_state(pb::RECOVERING);
      job->rec.info.set_message("coordinator restarted");
      job->recover_reason = "coordinator restarted";
      SIFT_RETURN_IF_ERROR(
          c->Log(job.get(), absl::StrCat("RECOVERING: coordinator restarted (", JobStateName(s),
                                         " at generation ", job->rec.info.generation(), ")")));
      SIFT_RETURN_IF_ERROR(c->Persist(*job));
    }
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Helpers

Coordinator::Job* Coordinator::FindJob(const std::string& job_id) {
  for (auto& job : jobs_) {
    if (job->rec.info.job_id() == job_id) return job.get();
  }
  return nullptr;
}

StatusOr<Coordinator::Job*> Coordinator::FindJobOrError(const std::string& job_id) {
  if (job_id.empty()) {
    if (jobs_.empty()) return absl::NotFoundError("no job has been submitted");
    return jobs_.back().get();
  }
  Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("unknown job \"", job_id, "\""));
  return job;
}

Coordinator::Job* Coordinator::ActiveJob() {
  for (auto& job : jobs_) {
    if (IsActive(job->rec.info.state())) return job.get();
  }
  return nullptr;
}

Status Coordinator::CheckJobCredential(const Principal& who, const std::string& job_id,
                                       int64_t generation, absl::string_view method) const {
  if (!who.remote) return absl::OkStatus();
  JobCredentialClaim claim;
  if (who.job_credential.empty()) {
    return AuthRefusal(absl::StatusCode::kPermissionDenied,
                       absl::StrCat(method, ": no job credential: only a rank of ", job_id,
                                    " generation ", generation, " may act on it"));
  }
  if (!credentials_->Verify(who.job_credential, &claim)) {
    return AuthRefusal(absl::StatusCode::kPermissionDenied,
                       absl::StrCat(method,
                                    ": the job credential presented is not one this "
                                    "coordinator issued; only a rank of ",
                                    job_id, " generation ", generation, " may act on it"));
  }
  if (claim.job_id != job_id || claim.generation != generation) {
    return AuthRefusal(absl::StatusCode::kPermissionDenied,
                       absl::StrCat(method, ": the call names ", job_id, " generation ", generation,
                                    " but presents the credential of ", claim.Describe(),
                                    "; a member acts only inside its own job and generation"));
  }
  return absl::OkStatus();
}

StatusOr<Coordinator::Job*> Coordinator::Fence(const std::string& job_id, int64_t generation,
                                               const Principal& who, absl::string_view method) {
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  SIFT_RETURN_IF_ERROR(CheckJobCredential(who, job_id, generation, method));
  Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("unknown job \"", job_id, "\""));
  const pb::JobInfo& info = job->rec.info;
  if (job != ActiveJob() || generation != info.generation() || !IsRunning(info.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stale generation: ", job_id, " generation ", generation, " is not running (", job_id,
        " is ", JobStateName(info.state()), " at generation ", info.generation(), ")"));
  }
  return job;
}

Status Coordinator::CheckRank(const Job& job, int rank) const {
  const int world = static_cast<int>(job.worker_ids.size());
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in [0, ", world, ") of ",
                                                   job.rec.info.job_id(), " generation ",
                                                   job.rec.info.generation()));
  }
  return absl::OkStatus();
}

Status Coordinator::CheckSpecPaths(JobSpec* spec, const std::string& source, const Principal& who) {
  struct Field {
    std::string* path;
    const char* name;
    const std::string& root;
    const char* flag;
  };
  const Field fields[] = {
      {&spec->results_dir, "results_dir", options_.results_root, "--results-root"},
      {&spec->checkpoint.dir, "checkpoint.dir", options_.checkpoint_root, "--checkpoint-root"},
      {&spec->checkpoint.resume_from, "checkpoint.resume_from", options_.checkpoint_root,
       "--checkpoint-root"},
  };
  for (const Field& f : fields) {
    if (f.path->empty()) continue;
    const std::string field = absl::StrCat(source, ": ", f.name);
    // Relative paths are relative to the root (the CLI sends absolute ones).
    const std::string raw = (*f.path)[0] == '/' ? *f.path : JoinPath(f.root, *f.path);
    SIFT_ASSIGN_OR_RETURN(std::string path, NormalizedAbsolutePath(raw, field));
    if (!PathIsUnder(path, f.root)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", path, " is outside ", f.root,
          ", the directory this coordinator lets jobs use (coordinator ", f.flag, ")"));
    }
    const Status links = CheckNoSymlinksUnder(f.root, path, /*create=*/false);
    if (!links.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", links.message()));
    *f.path = path;
  }
  const std::string& resume = spec->checkpoint.resume_from;
  if (resume.empty() || !who.checked || who.role == UserRole::kAdmin) return absl::OkStatus();
  // A job's checkpoints are <checkpoint.dir>/<job_id>/...: the job whose directory holds it.
  if (const Job* other = CheckpointOwnerJob(resume); other != nullptr) {
    if (!other->rec.info.owner().empty() && other->rec.info.owner() == who.user) {
      return absl::OkStatus();
    }
    return AuthRefusal(
        absl::StatusCode::kPermissionDenied,
        absl::StrCat(source, ": checkpoint.resume_from: ", resume, " is a checkpoint of ",
                     other->rec.info.job_id(), ", owned by ",
                     other->rec.info.owner().empty() ? "nobody" : other->rec.info.owner(),
                     "; user ", who.user,
                     " may resume only from its own jobs' checkpoints "
                     "(admins from any)"));
  }
  return AuthRefusal(
      absl::StatusCode::kPermissionDenied,
      absl::StrCat(source, ": checkpoint.resume_from: ", resume,
                   " is not a checkpoint of a job this coordinator ran; user ", who.user,
                   " may resume only from its own jobs' checkpoints (admins "
                   "from any)"));
}

const Coordinator::Job* Coordinator::CheckpointOwnerJob(const std::string& checkpoint) const {
  const Job* best = nullptr;
  size_t best_len = 0;
  for (const auto& other : jobs_) {
    const std::string dir = JoinPath(other->spec.checkpoint.dir, other->rec.info.job_id());
    if (PathIsUnder(checkpoint, dir) && dir.size() > best_len) {
      best = other.get();
      best_len = dir.size();
    }
  }
  return best;
}

Status Coordinator::CheckResumeCheckpoint(Job* job) {
  job->restorable_snapshot.clear();
  const std::string& dir = job->rec.info.last_checkpoint().dir();
  if (dir.empty()) return absl::OkStatus();
  SIFT_RETURN_IF_ERROR(CheckNoSymlinksUnder(options_.checkpoint_root, dir, /*create=*/false));
  const std::string name = ManifestSnapshotName(dir);
  const Job* owner = CheckpointOwnerJob(dir);
  if (owner != nullptr && !name.empty() &&
      !absl::StartsWith(name, absl::StrCat("ckpt-", owner->rec.info.job_id(), "-g"))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the checkpoint ", dir, " is ", owner->rec.info.job_id(), "'s, but its manifest names ",
        "the snapshot '", name, "', which is not: a job restores only its checkpoint's own"));
  }
  job->restorable_snapshot = name;
  return absl::OkStatus();
}

Status Coordinator::CheckOwner(const Job& job, const Principal& who, absl::string_view method,
                               bool cancel) {
  if (!who.checked || who.role == UserRole::kAdmin) return absl::OkStatus();
  // Readers, and members (GetJob only, CheckCaller decides), read every job.
  if ((who.role == UserRole::kReader || !who.member.empty()) && !cancel) return absl::OkStatus();
  const pb::JobInfo& info = job.rec.info;
  if (who.role == UserRole::kOperator && !who.user.empty() && info.owner() == who.user) {
    return absl::OkStatus();
  }
  return AuthRefusal(
      absl::StatusCode::kPermissionDenied,
      absl::StrCat(method, ": ", info.job_id(), " is owned by ",
                   info.owner().empty() ? "nobody (submitted without security)" : info.owner(),
                   "; user ", who.user, " (", UserRoleName(who.role), ") may only ",
                   cancel ? "cancel" : "read", " its own jobs (admins may do any)"));
}

Status Coordinator::CheckIdentity(const Member& member, const Principal& who,
                                  absl::string_view method) {
  if (!who.checked || member.identity == who.member) return absl::OkStatus();
  return AuthRefusal(absl::StatusCode::kPermissionDenied,
                     absl::StrCat(method, ": member ", member.id, " was registered by ",
                                  member.identity.empty() ? "no certificate" : member.identity,
                                  "; this call presents ",
                                  who.member.empty() ? "no member certificate" : who.member));
}

Status Coordinator::CheckRankCaller(const Job& job, int rank, const Principal& who,
                                    absl::string_view method) {
  if (!who.checked) return absl::OkStatus();
  auto it = rank >= 0 && rank < static_cast<int>(job.worker_ids.size())
                ? members_.find(job.worker_ids[rank])
                : members_.end();
  if (it == members_.end()) {
    return AuthRefusal(absl::StatusCode::kPermissionDenied,
                       absl::StrCat(method, ": rank ", rank, " of ", job.rec.info.job_id(),
                                    " has no live member for ", who.member, " to speak for"));
  }
  return CheckIdentity(it->second, who, method);
}

Status Coordinator::CheckRegistration(const pb::RegisterRequest& request, const Principal& who) {
  if (!who.checked) return absl::OkStatus();
  StatusOr<MemberName> name = ParseMemberName(who.member);
  const bool server = request.role() == pb::EMBEDDING_SERVER;
  const std::string wanted =
      server ? absl::StrCat("server-", request.shard()) : "worker or worker-<i>";
  const bool fits = name.ok() && (server ? name->kind == MemberName::kServer &&
                                               name->index == static_cast<int64_t>(request.shard())
                                         : name->kind == MemberName::kWorker);
  if (!fits) {
    return AuthRefusal(
        absl::StatusCode::kPermissionDenied,
        absl::StrCat("Register: the certificate of ", who.member, " cannot register as ",
                     server ? absl::StrCat("embedding server shard ", request.shard())
                            : std::string("a worker"),
                     " (that needs ", wanted, ")"));
  }
  if (name->index < 0) return absl::OkStatus();  // "worker": no slot of its own
  for (const auto& [id, m] : members_) {
    if (m.identity == who.member) {
      return AuthRefusal(
          absl::StatusCode::kAlreadyExists,
          absl::StrCat("Register: ", who.member, " is registered and alive (member ", id, " at ",
                       m.address, "); a second registration is refused until its lease (",
                       options_.lease_ms, " ms after its last heartbeat) ends"));
    }
  }
  return absl::OkStatus();
}

Status Coordinator::Log(Job* job, absl::string_view text) {
  // One event per line: newlines in worker-supplied messages become spaces.
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", Now(), absl::UTCTimeZone()), " ",
                   absl::StrReplaceAll(text, {{"\r\n", " "}, {"\n", " "}, {"\r", " "}}));
  job->log.push_back(line);
  return store_->AppendLog(job->rec.info.job_id(), line);
}

Status Coordinator::Persist(const Job& job) { return store_->Save(job.rec); }

std::string Coordinator::KvPrefix(const Job& job) const {
  return absl::StrCat(job.rec.info.job_id(), "/g", job.rec.info.generation());
}

void Coordinator::DropKvPrefix(const std::string& prefix) {
  kv_prefix_bytes_.erase(prefix);
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && absl::StartsWith(it->first, prefix);) {
    // "job-1/g1" must not take "job-1/g10/..." with it.
    const bool ours =
        it->first.size() == prefix.size() || !absl::ascii_isdigit(it->first[prefix.size()]);
    if (ours) kv_bytes_ -= static_cast<int64_t>(it->first.size() + it->second.size());
    it = ours ? kv_.erase(it) : std::next(it);
  }
}

pb::Assignment Coordinator::GenerationAssignment(const Job& job, int rank) const {
  pb::Assignment a;
  a.set_job_id(job.rec.info.job_id());
  a.set_generation(job.rec.info.generation());
  a.set_rank(rank);
  a.set_world_size(static_cast<int>(job.worker_ids.size()));
  a.set_job_credential(job.credential);
  a.set_owner(job.rec.info.owner());
  return a;
}

pb::Assignment Coordinator::AssignmentFor(const Job& job, int rank) const {
  pb::Assignment a = GenerationAssignment(job, rank);
  a.set_spec_yaml(job.rec.info.spec_yaml());
  for (const std::string& s : job.rec.info.servers()) a.add_servers(s);
  a.set_resume_checkpoint(job.rec.info.last_checkpoint().dir());
  a.set_kv_prefix(KvPrefix(job));
  a.set_checkpoint_root(options_.checkpoint_root);
  return a;
}

pb::Assignment Coordinator::ServerAssignmentFor(const Job& job, int shard) const {
  pb::Assignment a = GenerationAssignment(job, shard);
  a.set_restorable_snapshot(job.restorable_snapshot);
  return a;
}

bool Coordinator::ServersReady(const Job& job) const {
  for (const std::string& id : job.server_ids) {
    auto it = members_.find(id);
    if (it == members_.end() || it->second.running_job != job.rec.info.job_id() ||
        it->second.running_generation != job.rec.info.generation()) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Transitions

void Coordinator::EndGeneration(Job* job) {
  if (job->rec.info.generation() > 0) DropKvPrefix(KvPrefix(*job));
  job->eval.clear();
  job->worker_ids.clear();
  job->worker_started.clear();
  job->server_ids.clear();
}

Status Coordinator::Recover(Job* job, const std::string& why) {
  EndGeneration(job);
  pb::JobInfo& info = job->rec.info;
  info.set_recoveries(info.recoveries() + 1);
  if (info.recoveries() > options_.max_recoveries) {
    return Finish(job, pb::FAILED,
                  absl::StrCat(why, "; giving up after ", info.recoveries(),
                               " recoveries (--max-recoveries ", options_.max_recoveries, ")"));
  }
  info.set_state(pb::RECOVERING);
  info.set_message(why);
  job->recover_reason = why;
  Status s = Log(job, absl::StrCat("RECOVERING (recovery ", info.recoveries(), "): ", why));
  s.Update(Persist(*job));
  return s;
}

Status Coordinator::Finish(Job* job, pb::JobState state, const std::string& message) {
  EndGeneration(job);
  pb::JobInfo& info = job->rec.info;
  info.set_state(state);
  info.set_message(message);
  info.set_end_time(UnixSeconds(Now()));
  job->dll.reset();
  Status s = Log(job, message.empty() ? JobStateName(state)
                                      : absl::StrCat(JobStateName(state), ": ", message));
  s.Update(Persist(*job));
  return s;
}

void Coordinator::MemberLost(const Member& m, const std::string& why, bool replaced) {
  Job* job = ActiveJob();
  if (job == nullptr || !IsRunning(job->rec.info.state())) return;
  if (m.role == pb::WORKER) {
    for (size_t r = 0; r < job->worker_ids.size(); ++r) {
      if (job->worker_ids[r] == m.id) {
        Complain(Recover(job, absl::StrCat("lost worker rank ", r, " (", m.address, "): ", why)));
        return;
      }
    }
  } else if (m.shard < job->server_ids.size() && job->server_ids[m.shard] == m.id) {
    Complain(Recover(job, replaced ? why
                                   : absl::StrCat("lost embedding server shard ", m.shard, " (",
                                                  m.address, "): ", why)));
  }
}

void Coordinator::WorkerHeartbeat(const Member& m) {
  Job* job = ActiveJob();
  if (job == nullptr || !IsRunning(job->rec.info.state())) return;
  const pb::JobInfo& info = job->rec.info;
  for (size_t r = 0; r < job->worker_ids.size(); ++r) {
    if (job->worker_ids[r] != m.id) continue;
    if (m.running_job == info.job_id() && m.running_generation == info.generation()) {
      job->worker_started[r] = true;
      return;
    }
    // Not started yet (the assignment is on its way), or done: nothing is lost.
    if (!job->worker_started[r] || RankDone(*job, static_cast<int>(r))) return;
    Complain(Recover(
        job, absl::StrCat("worker rank ", r, " (", m.address, ") stopped running generation ",
                          info.generation(), " without a failure report (see its log)")));
    return;
  }
}

bool Coordinator::RankDone(const Job& job, int rank) const {
  const int64_t last_epoch = job.stop_epoch >= 0 ? job.stop_epoch : job.spec.training.epochs - 1;
  for (int split = 0; split < NumEvalSplits(job.spec); ++split) {
    auto it = job.eval.find({last_epoch, split, rank});
    if (it == job.eval.end() || !it->second.last) return false;
  }
  return true;
}

void Coordinator::ExpireLeases() {
  const absl::Time deadline = Now() - absl::Milliseconds(options_.lease_ms);
  std::vector<Member> lost;
  for (auto it = members_.begin(); it != members_.end();) {
    if (it->second.last_seen < deadline) {
      lost.push_back(std::move(it->second));
      it = members_.erase(it);
    } else {
      ++it;
    }
  }
  for (const Member& m : lost) MemberLost(m, "lease expired");
}

void Coordinator::Schedule() {
  while (true) {
    Job* job = ActiveJob();
    // Jobs behind the active one wait in submission order.
    for (auto& other : jobs_) {
      if (job != nullptr && other.get() != job && other->rec.info.state() == pb::PENDING) {
        other->rec.info.set_message(absl::StrCat("queued behind ", job->rec.info.job_id()));
      }
    }
    if (job == nullptr) return;
    const pb::JobState state = job->rec.info.state();
    if (state != pb::PENDING && state != pb::RECOVERING) return;
    if (state == pb::PENDING && job->head_since == absl::InfinitePast()) job->head_since = Now();

    const int S = job->spec.cluster.servers;
    const int W = job->spec.cluster.workers;
    std::vector<const Member*> servers(S, nullptr);
    std::vector<const Member*> idle;
    for (const auto& [id, m] : members_) {
      if (m.role == pb::EMBEDDING_SERVER) {
        if (m.num_shards == static_cast<uint32_t>(S) && m.shard < static_cast<uint32_t>(S)) {
          servers[m.shard] = &m;
        }
      } else if (m.role == pb::WORKER && m.running_job.empty()) {
        idle.push_back(&m);
      }
    }
    std::vector<std::string> missing;
    std::vector<int> missing_shards;
    for (int i = 0; i < S; ++i) {
      if (servers[i] == nullptr) missing_shards.push_back(i);
    }
    if (!missing_shards.empty()) {
      missing.push_back(absl::StrCat("waiting for embedding server shard",
                                     missing_shards.size() > 1 ? "s " : " ",
                                     RangesText(missing_shards), " of ", S));
    }
    if (static_cast<int>(idle.size()) < W) {
      const int more = W - static_cast<int>(idle.size());
      missing.push_back(absl::StrCat("waiting for ", more, " more worker", more > 1 ? "s" : ""));
    }
    if (!missing.empty()) {
      std::string message = absl::StrJoin(missing, "; ");
      // A recovering job keeps saying why it recovers.
      if (state == pb::RECOVERING && !job->recover_reason.empty()) {
        message = absl::StrCat(job->recover_reason, "; ", message);
      }
      const absl::Duration waited = Now() - job->head_since;
      if (state == pb::PENDING && options_.pending_timeout_ms > 0 &&
          waited >= absl::Milliseconds(options_.pending_timeout_ms)) {
        Complain(Finish(job, pb::FAILED,
                        absl::StrCat("not scheduled within ", options_.pending_timeout_ms / 1000,
                                     " s (coordinator --pending-timeout-ms): ", message)));
        continue;  // the next job may run
      }
      job->rec.info.set_message(message);
      return;
    }
    std::sort(idle.begin(), idle.end(),
              [](const Member* a, const Member* b) { return a->seq < b->seq; });
    idle.resize(W);
    Complain(StartGeneration(job, idle, servers));
    if (!IsFinished(job->rec.info.state())) return;
    // It failed to start (e.g. its results_dir is not writable): the next job may run.
  }
}

Status Coordinator::OpenDll(Job* job) {
  if (job->dll != nullptr || job->rec.info.results_dir().empty()) return absl::OkStatus();
  SIFT_RETURN_IF_ERROR(CheckNoSymlinksUnder(options_.results_root, job->rec.info.results_dir(),
                                            /*create=*/true));
  SIFT_ASSIGN_OR_RETURN(auto sink, FileLineSink::Open(JoinPath(job->rec.info.results_dir(),
                                                               options_.dll_log_filename)));
  Clock clock = options_.clock;
  auto dll = std::make_unique<DLLogger>(std::move(sink), nullptr,
                                        [clock] { return absl::ToUnixMicros(clock()); });
  // The METADATA lines open the log once per job, not again after a recovery or a restart.
  if (!job->rec.dll_metadata_written) {
    SIFT_RETURN_IF_ERROR(dll->WriteReferenceMetadata());
    job->rec.dll_metadata_written = true;
  }
  job->dll = std::move(dll);
  return absl::OkStatus();
}

Status Coordinator::DllLog(Job* job, const DllStep& step, const DllMetrics& metrics) {
  if (job->rec.info.results_dir().empty()) return absl::OkStatus();
  SIFT_RETURN_IF_ERROR(OpenDll(job));
  return job->dll->Log(step, metrics);
}

Status Coordinator::StartGeneration(Job* job, const std::vector<const Member*>& workers,
                                    const std::vector<const Member*>& servers) {
  pb::JobInfo& info = job->rec.info;
  const std::string own_checkpoints = JoinPath(job->spec.checkpoint.dir, info.job_id());
  if (info.generation() == 0 && !info.results_dir().empty()) {
    // The job's results directory is its own: when <results_dir>/<job id> exists already (a job
    // of the same id of another coordinator, or of an earlier state directory), the job gets
    // <job id>.2, .3, ... instead of writing into it.
    const std::string base = info.results_dir();
    for (int k = 2; PathExists(info.results_dir()) && k < 1000000; ++k) {
      info.set_results_dir(absl::StrCat(base, ".", k));
    }
  }
  const Status dll = OpenDll(job);
  if (!dll.ok()) {
    return Finish(job, pb::FAILED, absl::StrCat("results_dir: ", dll.message()));
  }
  // Rank 0 writes and prunes <checkpoint.dir>/<job id>/: never through a symbolic link.
  const Status links =
      CheckNoSymlinksUnder(options_.checkpoint_root, own_checkpoints, /*create=*/false);
  if (!links.ok()) {
    return Finish(job, pb::FAILED, absl::StrCat("checkpoint.dir: ", links.message()));
  }
  const Status resume = CheckResumeCheckpoint(job);
  if (!resume.ok()) {
    return Finish(job, pb::FAILED, absl::StrCat("checkpoint.resume_from: ", resume.message()));
  }
  job->generation_since = Now();
  info.set_generation(info.generation() + 1);
  job->credential = credentials_->Issue(info.job_id(), info.generation());
  info.set_state(pb::RUNNING);
  info.set_message("");
  job->recover_reason.clear();
  if (info.start_time() == 0) info.set_start_time(UnixSeconds(Now()));
  job->worker_ids.clear();
  job->server_ids.clear();
  job->eval.clear();
  info.clear_workers();
  info.clear_servers();
  for (const Member* w : workers) {
    job->worker_ids.push_back(w->id);
    info.add_workers(w->address);
  }
  job->worker_started.assign(workers.size(), false);
  for (const Member* s : servers) {
    job->server_ids.push_back(s->id);
    info.add_servers(s->address);
  }
  const pb::CheckpointRef& ckpt = info.last_checkpoint();
  std::string from;
  if (ckpt.dir().empty()) {
    info.set_epoch(0);
    info.set_global_step(0);
    from = "fresh start";
  } else {
    info.set_epoch(ckpt.epochs_done());
    info.set_global_step(ckpt.global_step());
    from = absl::StrCat("resuming from checkpoint at step ", ckpt.global_step(), " (",
                        ckpt.epochs_done(), " epoch(s) done) in ", ckpt.dir());
  }
  Status s = Log(job, absl::StrCat("RUNNING: generation ", info.generation(), ", workers [",
                                   absl::StrJoin(info.workers(), ", "), "], servers [",
                                   absl::StrJoin(info.servers(), ", "), "], ", from));
  s.Update(Persist(*job));
  return s;
}

// ---------------------------------------------------------------------------------------------
// Jobs

StatusOr<pb::SubmitJobResponse> Coordinator::SubmitJob(const pb::SubmitJobRequest& request,
                                                       const Principal& who) {
  const std::string source = request.source_name().empty() ? "job.yaml" : request.source_name();
  SIFT_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(request.spec_yaml(), source));
  if (spec.cluster.servers > options_.max_servers || spec.cluster.workers > options_.max_workers) {
    const bool servers = spec.cluster.servers > options_.max_servers;
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": cluster.", servers ? "servers" : "workers", ": ",
        servers ? spec.cluster.servers : spec.cluster.workers,
        " is more than this coordinator runs (", servers ? "--max-servers " : "--max-workers ",
        servers ? options_.max_servers : options_.max_workers, ")"));
  }
  SIFT_RETURN_IF_ERROR(CheckClusterJob(spec, source));
  if (spec.checkpoint.dir.empty()) {
    // Every completed job leaves its model: without a checkpoint.dir, only the final one, under
    // <state-dir>/checkpoints, or the checkpoint root when that is elsewhere (rank 0 writes it:
    // a shared file system in a real cluster).
    StatusOr<std::string> under_state =
        NormalizedAbsolutePath(JoinPath(options_.state_dir, "checkpoints"), "--state-dir");
    if (under_state.ok()) {
      std::error_code ec;  // the state directory's own links resolved, as the roots' are
      const std::filesystem::path real = std::filesystem::weakly_canonical(*under_state, ec);
      if (!ec) under_state = real.string();
    }
    spec.checkpoint.dir = under_state.ok() && PathIsUnder(*under_state, options_.checkpoint_root)
                              ? *under_state
                              : options_.checkpoint_root;
    spec.checkpoint.every_epoch = false;
    spec.checkpoint.every_steps = 0;
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  SIFT_RETURN_IF_ERROR(CheckSpecPaths(&spec, source, who));
  auto job = std::make_unique<Job>();
  const std::string id = absl::StrCat("job-", next_job_number_);
  SIFT_RETURN_IF_ERROR(store_->SaveNextJobNumber(next_job_number_ + 1));
  ++next_job_number_;
  pb::JobInfo& info = job->rec.info;
  info.set_job_id(id);
  info.set_name(JobNameFor(spec, source));
  info.set_state(pb::PENDING);
  info.set_owner(who.user);
  info.set_spec_yaml(JobSpecToYaml(spec));
  if (!spec.results_dir.empty()) info.set_results_dir(JoinPath(spec.results_dir, id));
  info.set_epochs(spec.training.epochs);
  info.set_oracle_test_auc(-1);
  info.set_submit_time(UnixSeconds(Now()));
  // A job resumed from another's checkpoint starts there (its own checkpoints go elsewhere).
  info.mutable_last_checkpoint()->set_dir(spec.checkpoint.resume_from);
  job->spec = std::move(spec);
  Job* j = job.get();
  SIFT_RETURN_IF_ERROR(Persist(*j));
  jobs_.push_back(std::move(job));
  SIFT_RETURN_IF_ERROR(
      Log(j, absl::StrCat("submitted: ", j->spec.cluster.workers, " workers, ",
                          j->spec.cluster.servers, " embedding servers, ", j->spec.training.epochs,
                          " epochs of ", j->spec.model.type, " on ", j->spec.dataset)));
  Schedule();
  pb::SubmitJobResponse response;
  response.set_job_id(id);
  return response;
}

StatusOr<pb::JobInfo> Coordinator::GetJob(const pb::GetJobRequest& request, const Principal& who) {
  absl::MutexLock lock(&mu_);
  if (request.job_id().empty() && who.checked && who.role == UserRole::kOperator) {
    // An operator's "latest job" is the latest of its own.
    for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
      if ((*it)->rec.info.owner() == who.user) return (*it)->rec.info;
    }
    return absl::NotFoundError(absl::StrCat("user ", who.user, " has submitted no job"));
  }
  SIFT_ASSIGN_OR_RETURN(Job * job, FindJobOrError(request.job_id()));
  SIFT_RETURN_IF_ERROR(CheckOwner(*job, who, "GetJob", /*cancel=*/false));
  if (who.checked && who.user.empty() && !who.member.empty()) {
    // A member reads only a job it has run (a credential of one of its generations).
    JobCredentialClaim claim;
    if (!credentials_->Verify(who.job_credential, &claim) ||
        claim.job_id != job->rec.info.job_id()) {
      return AuthRefusal(
          absl::StatusCode::kPermissionDenied,
          absl::StrCat("GetJob: member ", who.member, " presents no credential of ",
                       job->rec.info.job_id(), "; a member reads only the jobs it has run"));
    }
  }
  return job->rec.info;
}

StatusOr<pb::ListJobsResponse> Coordinator::ListJobs(const pb::ListJobsRequest&,
                                                     const Principal& who) {
  absl::MutexLock lock(&mu_);
  pb::ListJobsResponse response;
  for (const auto& job : jobs_) {
    if (CheckOwner(*job, who, "ListJobs", /*cancel=*/false).ok()) {
      *response.add_jobs() = job->rec.info;
    }
  }
  return response;
}

StatusOr<pb::JobInfo> Coordinator::CancelJob(const pb::CancelJobRequest& request,
                                             const Principal& who) {
  absl::MutexLock lock(&mu_);
  if (request.job_id().empty()) return absl::InvalidArgumentError("job_id is empty");
  SIFT_ASSIGN_OR_RETURN(Job * job, FindJobOrError(request.job_id()));
  SIFT_RETURN_IF_ERROR(CheckOwner(*job, who, "CancelJob", /*cancel=*/true));
  const pb::JobState state = job->rec.info.state();
  if (!IsActive(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat(request.job_id(), " is ", JobStateName(state),
                     ": only a PENDING, RUNNING, CHECKPOINTING or RECOVERING job can be "
                     "cancelled"));
  }
  SIFT_RETURN_IF_ERROR(
      Finish(job, pb::CANCELLED, absl::StrCat("cancelled while ", JobStateName(state))));
  Schedule();
  return job->rec.info;
}

StatusOr<pb::GetLogsResponse> Coordinator::GetLogs(const pb::GetLogsRequest& request,
                                                   const Principal& who) {
  absl::MutexLock lock(&mu_);
  if (request.offset() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset ", request.offset(), " < 0"));
  }
  SIFT_ASSIGN_OR_RETURN(Job * job, FindJobOrError(request.job_id()));
  SIFT_RETURN_IF_ERROR(CheckOwner(*job, who, "GetLogs", /*cancel=*/false));
  pb::GetLogsResponse response;
  const int64_t size = static_cast<int64_t>(job->log.size());
  // (offset + the cap could overflow for an offset near INT64_MAX.)
  const int64_t end =
      request.offset() >= size ? size : std::min(size, request.offset() + kMaxLogLinesPerCall);
  for (int64_t i = request.offset(); i < end; ++i) response.add_lines(job->log[i]);
  response.set_next_offset(std::max(request.offset(), end));
  response.set_state(job->rec.info.state());
  response.set_finished(IsFinished(job->rec.info.state()) && end == size);
  return response;
}

// ---------------------------------------------------------------------------------------------
// Members

StatusOr<pb::RegisterResponse> Coordinator::Register(const pb::RegisterRequest& request,
                                                     const Principal& who) {
  if (request.role() != pb::WORKER && request.role() != pb::EMBEDDING_SERVER) {
    return absl::InvalidArgumentError(absl::StrCat("role: ", pb::Role_Name(request.role()),
                                                   " is not WORKER or EMBEDDING_SERVER"));
  }
  if (request.address().empty()) return absl::InvalidArgumentError("address is empty");
  if (request.role() == pb::EMBEDDING_SERVER &&
      (request.num_shards() < 1 || request.shard() >= request.num_shards())) {
    return absl::InvalidArgumentError(absl::StrCat("embedding server shard ", request.shard(),
                                                   " is not in [0, num_shards ",
                                                   request.num_shards(), ")"));
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  ExpireLeases();
  SIFT_RETURN_IF_ERROR(CheckRegistration(request, who));
  Member m;
  m.identity = who.member;
  m.id = absl::StrCat(member_id_prefix_, next_member_seq_);
  m.seq = next_member_seq_++;
  m.role = request.role();
  m.address = request.address();
  m.shard = request.shard();
  m.num_shards = request.num_shards();
  m.last_seen = Now();
  if (m.role == pb::EMBEDDING_SERVER) {
    // A later registration of a shard replaces the earlier one: the old process is gone (or
    // about to be), and with it the tables the running job had in that shard.
    for (auto it = members_.begin(); it != members_.end(); ++it) {
      if (it->second.role == pb::EMBEDDING_SERVER && it->second.shard == m.shard) {
        const Member old = std::move(it->second);
        members_.erase(it);
        MemberLost(old,
                   absl::StrCat("embedding server shard ", m.shard, " restarted (", old.address,
                                " -> ", m.address, "): its tables are gone"),
                   /*replaced=*/true);
        break;
      }
    }
  }
  members_[m.id] = m;
  Schedule();
  pb::RegisterResponse response;
  response.set_member_id(m.id);
  response.set_heartbeat_interval_ms(options_.heartbeat_ms);
  response.set_lease_ms(options_.lease_ms);
  return response;
}

StatusOr<pb::HeartbeatResponse> Coordinator::Heartbeat(const pb::HeartbeatRequest& request,
                                                       const Principal& who) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  ExpireLeases();
  auto it = members_.find(request.member_id());
  if (it == members_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown member id \"", request.member_id(),
                                            "\" (its lease expired or the coordinator "
                                            "restarted): register again"));
  }
  Member& m = it->second;
  SIFT_RETURN_IF_ERROR(CheckIdentity(m, who, "Heartbeat"));
  m.last_seen = Now();
  const std::string id = m.id;
  m.running_job = request.running_job_id();
  m.running_generation = request.running_job_id().empty() ? 0 : request.running_generation();
  if (m.role == pb::WORKER) WorkerHeartbeat(m);
  Schedule();
  pb::HeartbeatResponse response;
  Job* job = ActiveJob();
  if (job != nullptr && IsRunning(job->rec.info.state())) {
    for (size_t r = 0; r < job->worker_ids.size(); ++r) {
      // A rank's calls go to the servers: they must know the generation first.
      if (job->worker_ids[r] == id && ServersReady(*job)) {
        *response.mutable_assignment() = AssignmentFor(*job, static_cast<int>(r));
      }
    }
    for (size_t i = 0; i < job->server_ids.size(); ++i) {
      if (job->server_ids[i] == id) {
        *response.mutable_assignment() = ServerAssignmentFor(*job, static_cast<int>(i));
      }
    }
  }
  return response;
}

// ---------------------------------------------------------------------------------------------
// KV

namespace {
// `key` is `prefix` or continues it with '/'.
bool UnderKvPrefix(absl::string_view key, absl::string_view prefix) {
  return absl::StartsWith(key, prefix) &&
         (key.size() == prefix.size() || key[prefix.size()] == '/');
}
}  // namespace

StatusOr<Coordinator::Job*> Coordinator::KvCaller(const Principal& who, absl::string_view method,
                                                  const std::vector<std::string>& keys) {
  Job* job = ActiveJob();
  if (!who.remote) return job;  // in-process: FenceKvKey decides
  // The running generation's rank presents exactly its credential; anything else is refused,
  // as stale when it is a genuine credential of another generation.
  if (job == nullptr || !IsRunning(job->rec.info.state()) ||
      !JobCredentialEquals(who.job_credential, job->credential)) {
    JobCredentialClaim claim;
    if (who.job_credential.empty() || !credentials_->Verify(who.job_credential, &claim)) {
      return AuthRefusal(
          absl::StatusCode::kPermissionDenied,
          absl::StrCat(method,
                       who.job_credential.empty() ? ": no job credential"
                                                  : ": a job credential this coordinator "
                                                    "did not issue",
                       ": only the ranks of a running generation use the rendezvous store, under "
                       "their generation's prefix"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "stale generation: ", method, " with the credential of ", claim.Describe(),
        ", which is not running",
        job == nullptr ? ""
                       : absl::StrCat(" (", job->rec.info.job_id(), " is ",
                                      JobStateName(job->rec.info.state()), " at generation ",
                                      job->rec.info.generation(), ")")));
  }
  const std::string prefix = KvPrefix(*job);
  for (const std::string& key : keys) {
    if (!UnderKvPrefix(key, prefix)) {
      return AuthRefusal(
          absl::StatusCode::kPermissionDenied,
          absl::StrCat(method, ": key \"", SanitizeUtf8(key, 256), "\" is outside \"", prefix,
                       "/\", the prefix of ", job->rec.info.job_id(), " generation ",
                       job->rec.info.generation(), " whose credential the call presents"));
    }
  }
  return job;
}

StatusOr<pb::KvSetResponse> Coordinator::KvSet(const pb::KvSetRequest& request,
                                               const Principal& who) {
  if (request.key().empty()) return absl::InvalidArgumentError("key is empty");
  if (request.key().size() > kMaxKvKeyBytes || request.value().size() > kMaxKvValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvSet: key of ", request.key().size(), " bytes and value of ",
                     request.value().size(), " bytes; at most ", kMaxKvKeyBytes, " and ",
                     kMaxKvValueBytes, " (the store holds rendezvous addresses, not data)"));
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  SIFT_ASSIGN_OR_RETURN(Job * job, KvCaller(who, "KvSet", {request.key()}));
  std::string prefix;
  if (who.remote) {
    prefix = KvPrefix(*job);
  } else {
    SIFT_RETURN_IF_ERROR(FenceKvKey(request.key()));
  }
  auto it = kv_.find(request.key());
  const int64_t old_bytes =
      it == kv_.end() ? 0 : static_cast<int64_t>(it->first.size() + it->second.size());
  const int64_t new_bytes = static_cast<int64_t>(request.key().size() + request.value().size());
  if (kv_bytes_ - old_bytes + new_bytes > kMaxKvTotalBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("KvSet: the key-value store holds ", kv_bytes_,
                                                     " bytes; this value would "
                                                     "take it past its limit of ",
                                                     kMaxKvTotalBytes));
  }
  if (!prefix.empty()) {
    int64_t& used = kv_prefix_bytes_[prefix];
    if (used - old_bytes + new_bytes > kMaxKvJobBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "KvSet: ", job->rec.info.job_id(), " generation ", job->rec.info.generation(), " holds ",
          used, " bytes of the key-value store; this value would take it past its quota of ",
          kMaxKvJobBytes));
    }
    used += new_bytes - old_bytes;
  }
  kv_bytes_ += new_bytes - old_bytes;
  kv_[request.key()] = request.value();
  return pb::KvSetResponse();
}

Status Coordinator::FenceKvKey(const std::string& key) {
  // "<job-id>/g<generation>" followed by the end or "/".
  const size_t slash = key.find('/');
  if (slash == std::string::npos || key.compare(slash + 1, 1, "g") != 0) return absl::OkStatus();
  const Job* job = FindJob(key.substr(0, slash));
  if (job == nullptr) return absl::OkStatus();
  const size_t digits = slash + 2;
  size_t end = digits;
  while (end < key.size() && absl::ascii_isdigit(key[end])) ++end;
  int64_t generation = 0;
  if (end == digits || (end < key.size() && key[end] != '/') ||
      !absl::SimpleAtoi(absl::string_view(key).substr(digits, end - digits), &generation)) {
    return absl::OkStatus();
  }
  const pb::JobInfo& info = job->rec.info;
  if (job == ActiveJob() && IsRunning(info.state()) && generation == info.generation()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("stale generation: KV key \"", key, "\" belongs to ", info.job_id(),
                   " generation ", generation, ", which is not running (", info.job_id(), " is ",
                   JobStateName(info.state()), " at generation ", info.generation(), ")"));
}

StatusOr<pb::KvGetResponse> Coordinator::KvGet(const pb::KvGetRequest& request,
                                               const Principal& who) {
  for (const std::string& key : request.keys()) {
    if (key.empty()) return absl::InvalidArgumentError("a key is empty");
  }
  const int64_t wait_ms = std::clamp<int64_t>(request.timeout_ms(), 0, kMaxKvWaitMs);
  absl::MutexLock lock(&mu_);
  if (who.remote) {
    const std::vector<std::string> keys(request.keys().begin(), request.keys().end());
    SIFT_RETURN_IF_ERROR(KvCaller(who, "KvGet", keys).status());
  }
  auto ready = [this, &request]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutting_down_) return true;
    for (const std::string& key : request.keys()) {
      if (kv_.find(key) == kv_.end()) return false;
    }
    return true;
  };
  const bool done = mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(wait_ms));
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  if (!done) {
    std::vector<std::string> missing;
    for (const std::string& key : request.keys()) {
      if (kv_.find(key) == kv_.end()) missing.push_back(key);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("keys not set within ", wait_ms, " ms: ", absl::StrJoin(missing, ", ")));
  }
  pb::KvGetResponse response;
  for (const std::string& key : request.keys()) response.add_values(kv_[key]);
  return response;
}

// ---------------------------------------------------------------------------------------------
// Workers of the running job

StatusOr<pb::ReportProgressResponse> Coordinator::ReportProgress(
    const pb::ReportProgressRequest& request, const Principal& who) {
  absl::MutexLock lock(&mu_);
  SIFT_ASSIGN_OR_RETURN(Job * job,
                        Fence(request.job_id(), request.generation(), who, "ReportProgress"));
  SIFT_RETURN_IF_ERROR(CheckRank(*job, request.rank()));
  SIFT_RETURN_IF_ERROR(CheckRankCaller(*job, request.rank(), who, "ReportProgress"));
  const int64_t epochs = job->spec.training.epochs;
  if (request.rank() != 0 && (request.steps_size() > 0 || request.epoch_end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", request.rank(), ": only rank 0 reports steps and epoch ends"));
  }
  if (request.steps_per_epoch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps_per_epoch ", request.steps_per_epoch(), " < 0"));
  }
  for (int i = 0; i < request.steps_size(); ++i) {
    const pb::StepRecord& s = request.steps(i);
    if (s.epoch() < 0 || s.epoch() >= epochs || s.step() < 0 || s.global_step() < 0 ||
        s.samples() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("steps[", i, "]: epoch ", s.epoch(), " (of ", epochs, "), step ", s.step(),
                       ", global_step ", s.global_step(), ", samples ", s.samples(),
                       ": epoch must be in range and the others >= 0"));
    }
  }
  if (request.epoch_end() && (request.epoch() < 0 || request.epoch() >= epochs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", request.epoch(), " is not in [0, ", epochs, ")"));
  }

  pb::JobInfo& info = job->rec.info;
  if (request.steps_per_epoch() > 0) info.set_steps_per_epoch(request.steps_per_epoch());
  if (request.oracle_test_auc() != 0) info.set_oracle_test_auc(request.oracle_test_auc());
  const bool with_aux = job->spec.model.type != "din";
  Status status;
  for (const pb::StepRecord& s : request.steps()) {
    info.set_samples_total(info.samples_total() + s.samples());
    ++job->rec.steps_total;
    info.set_global_step(s.global_step() + 1);
    info.set_epoch(s.epoch());
    info.set_last_loss(s.total_loss());
    info.set_samples_per_second(s.samples_per_second());
    // The same record as single-process `sift train` (worker/trainer.cc).
    DllMetrics m;
    m.emplace_back("total_loss", s.total_loss());
    if (with_aux) {
      m.emplace_back("classification_loss", s.classification_loss());
      m.emplace_back("dien_aux_loss", s.aux_loss());
    }
    m.emplace_back("samples/s", s.samples_per_second());
    if (status.ok()) status = DllLog(job, {s.epoch(), s.step()}, m);
  }
  if (request.epoch_end()) {
    EpochPerf perf;
    for (const pb::Metric& metric : request.epoch_perf()) {
      perf.metrics.emplace_back(metric.name(), metric.value());
    }
    perf.train_time_s = request.epoch_train_time_s();
    // An epoch trained over several generations (a recovery inside it): its time is the sum of
    // theirs, and a generation that resumed at the epoch's last step measured no throughput, so
    // the earlier generation's figures stay.
    auto earlier = job->rec.epoch_perf.find(request.epoch());
    if (earlier != job->rec.epoch_perf.end()) {
      perf.train_time_s += earlier->second.train_time_s;
      double throughput = 0;
      for (const auto& [name, value] : perf.metrics) {
        if (name == "throughput") throughput = value;
      }
      if (!(throughput > 0)) perf.metrics = earlier->second.metrics;
    }
    job->rec.epoch_perf[request.epoch()] = std::move(perf);
    info.set_epoch(request.epoch());
    status.Update(
        Log(job, absl::StrCat("epoch ", request.epoch() + 1, ": trained in ",
                              absl::SixDigits(request.epoch_train_time_s()), " s, evaluating")));
    status.Update(Persist(*job));
  }
  SIFT_RETURN_IF_ERROR(status);
  return pb::ReportProgressResponse();
}

StatusOr<pb::ReportEvalResponse> Coordinator::ReportEval(const pb::ReportEvalRequest& request,
                                                         const Principal& who) {
  absl::MutexLock lock(&mu_);
  SIFT_ASSIGN_OR_RETURN(Job * job,
                        Fence(request.job_id(), request.generation(), who, "ReportEval"));
  SIFT_RETURN_IF_ERROR(CheckRank(*job, request.rank()));
  SIFT_RETURN_IF_ERROR(CheckRankCaller(*job, request.rank(), who, "ReportEval"));
  int split = -1;
  for (int i = 0; i < NumEvalSplits(job->spec); ++i) {
    if (request.split() == kSplitNames[i]) split = i;
  }
  if (split < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split \"", request.split(), "\" is not ",
        NumEvalSplits(job->spec) == 3 ? "\"train\", \"test\" or \"validation\""
                                      : "\"train\" or \"test\" (the job has no validation split)"));
  }
  const int64_t epochs = job->spec.training.epochs;
  if (request.epoch() < 0 || request.epoch() >= epochs) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", request.epoch(), " is not in [0, ", epochs, ")"));
  }
  if (request.scores_size() != request.labels_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.scores_size(), " scores but ", request.labels_size(), " labels"));
  }
  EvalPart& part = job->eval[{request.epoch(), split, request.rank()}];
  if (part.last) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(),
                                                   " already sent its last chunk of epoch ",
                                                   request.epoch(), " ", request.split()));
  }
  part.scores.insert(part.scores.end(), request.scores().begin(), request.scores().end());
  part.labels.insert(part.labels.end(), request.labels().begin(), request.labels().end());
  part.loss_sum += request.loss_sum();
  part.last = request.last();
  if (part.last) SIFT_RETURN_IF_ERROR(MaybeFinishEpoch(job, request.epoch()));
  return pb::ReportEvalResponse();
}

Status Coordinator::MaybeFinishEpoch(Job* job, int64_t epoch) {
  const int world = static_cast<int>(job->worker_ids.size());
  const int splits = NumEvalSplits(job->spec);
  for (int split = 0; split < splits; ++split) {
    for (int r = 0; r < world; ++r) {
      auto it = job->eval.find({epoch, split, r});
      if (it == job->eval.end() || !it->second.last) return absl::OkStatus();
    }
  }
  // Every rank's predictions of every split are in: exact AUC over the concatenation.
  double auc[3] = {0, 0, 0}, loss[3] = {0, 0, 0};
  std::vector<double> test_scores;
  std::vector<float> test_labels;
  for (int split = 0; split < splits; ++split) {
    std::vector<double> scores;
    std::vector<float> labels;
    double loss_sum = 0;
    for (int r = 0; r < world; ++r) {
      const EvalPart& p = job->eval[{epoch, split, r}];
      scores.insert(scores.end(), p.scores.begin(), p.scores.end());
      labels.insert(labels.end(), p.labels.begin(), p.labels.end());
      loss_sum += p.loss_sum;
    }
    auc[split] = ExactAuc(scores, labels);
    if (split == 1) test_scores = scores, test_labels = labels;
    loss[split] = scores.empty() ? std::numeric_limits<double>::quiet_NaN()
                                 : loss_sum / static_cast<double>(scores.size());
    for (int r = 0; r < world; ++r) job->eval.erase({epoch, split, r});
  }
  pb::JobInfo& info = job->rec.info;
  const EpochPerf perf =
      job->rec.epoch_perf.count(epoch) ? job->rec.epoch_perf[epoch] : EpochPerf();
  pb::EpochResult result;
  result.set_epoch(epoch);
  result.set_train_auc(auc[0]);
  result.set_train_loss(loss[0]);
  result.set_test_auc(auc[1]);
  result.set_test_loss(loss[1]);
  const bool has_validation = splits == 3;
  if (has_validation) {
    result.set_has_validation(true);
    result.set_validation_auc(auc[kValidationSplit]);
    result.set_validation_loss(loss[kValidationSplit]);
  }
  for (const auto& [name, value] : perf.metrics) {
    if (name == "throughput") result.set_samples_per_second(value);
  }
  result.set_train_time_s(perf.train_time_s);
  // Replace the epoch's earlier result (a generation that re-ran it), keep epoch order.
  std::vector<pb::EpochResult> done(info.epochs_done().begin(), info.epochs_done().end());
  done.erase(std::remove_if(done.begin(), done.end(),
                            [epoch](const pb::EpochResult& e) { return e.epoch() == epoch; }),
             done.end());
  done.push_back(result);
  std::sort(done.begin(), done.end(), [](const pb::EpochResult& a, const pb::EpochResult& b) {
    return a.epoch() < b.epoch();
  });
  info.clear_epochs_done();
  double time_to_train = 0;
  for (const pb::EpochResult& e : done) {
    *info.add_epochs_done() = e;
    time_to_train += e.train_time_s();
  }
  info.set_time_to_train_s(time_to_train);
  info.set_epoch(epoch);
  // Model selection, as every rank decided it from the same predictions: the kept model so far
  // and whether patience ends the job here.
  const JobSpec::Training& t = job->spec.training;
  const bool keep_best = t.keep_best == "validation_auc";
  bool stop = false, kept = true;
  ModelSelection sel;
  if (has_validation) {
    sel = SelectionThrough(info, epoch);
    kept = !keep_best || sel.best_epoch == epoch;
    stop = sel.ShouldStop(epoch, t.patience) && epoch + 1 < t.epochs;
  }
  const bool final_epoch = epoch == t.epochs - 1 || stop;
  const std::string& results = job->rec.info.results_dir();
  if (!results.empty() && (keep_best ? kept : final_epoch)) {
    // The kept model's test predictions, for ROC curves (sift report). A failed write is a line
    // in the job's log, never a failed job: the training is done.
    Status saved = CheckNoSymlinksUnder(options_.results_root, results, /*create=*/true);
    if (saved.ok()) {
      saved =
          WritePredictionsCsv(JoinPath(results, kTestPredictionsFile), test_scores, test_labels);
    }
    if (!saved.ok()) {
      (void)Log(job,
                absl::StrCat("warning: the test predictions were not saved: ", saved.message()));
    }
  }

  // The epoch's DLLL record, in worker/trainer.cc's order.
  DllMetrics m = perf.metrics;
  m.emplace_back("train_auc", auc[0]);
  m.emplace_back("train_loss", loss[0]);
  if (has_validation) {
    m.emplace_back("validation_auc", auc[kValidationSplit]);
    m.emplace_back("validation_loss", loss[kValidationSplit]);
  }
  m.emplace_back("test_auc", auc[1]);
  m.emplace_back("test_loss", loss[1]);
  if (info.oracle_test_auc() > 0) {
    m.emplace_back("oracle_test_auc", info.oracle_test_auc());
    m.emplace_back("test_auc_to_oracle", auc[1] / info.oracle_test_auc());
  }
  Status status = DllLog(job, {epoch}, m);
  status.Update(Log(
      job,
      absl::StrCat("epoch ", epoch + 1, ": train AUC ", absl::SixDigits(auc[0]), " loss ",
                   absl::SixDigits(loss[0]),
                   has_validation
                       ? absl::StrCat(", validation AUC ", absl::SixDigits(auc[kValidationSplit]))
                       : std::string(),
                   ", test AUC ", absl::SixDigits(auc[1]), " loss ", absl::SixDigits(loss[1]))));
  if (final_epoch) {
    if (stop) {
      job->stop_epoch = epoch;
      status.Update(Log(job, absl::StrCat("early stop after epoch ", epoch + 1,
                                          ": no better "
                                          "validation AUC for ",
                                          t.patience, " epoch(s) (best: epoch ", sel.best_epoch + 1,
                                          ", ", absl::SixDigits(sel.best_validation_auc), ")")));
    }
    DllMetrics summary = {{"time_to_train", time_to_train},
                          {"train_auc", auc[0]},
                          {"train_loss", loss[0]},
                          {"test_auc", auc[1]},
                          {"test_loss", loss[1]}};
    const int64_t kept_epoch = keep_best && sel.best_epoch >= 0 ? sel.best_epoch : epoch;
    AppendSelectionMetrics(sel, keep_best, kept_epoch, epoch, has_validation, &summary);
    status.Update(DllLog(job, {}, summary));
    status.Update(Finish(job, pb::COMPLETED, ""));
    Schedule();
  } else {
    status.Update(Persist(*job));
  }
  return status;
}

StatusOr<pb::CheckpointBeginResponse> Coordinator::CheckpointBegin(
    const pb::CheckpointBeginRequest& request, const Principal& who) {
  absl::MutexLock lock(&mu_);
  SIFT_ASSIGN_OR_RETURN(Job * job,
                        Fence(request.job_id(), request.generation(), who, "CheckpointBegin"));
  SIFT_RETURN_IF_ERROR(CheckRankCaller(*job, 0, who, "CheckpointBegin"));
  if (request.global_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("global_step ", request.global_step(), " < 0"));
  }
  job->rec.info.set_state(pb::CHECKPOINTING);
  Status s = Log(job, absl::StrCat("CHECKPOINTING at step ", request.global_step()));
  s.Update(Persist(*job));
  SIFT_RETURN_IF_ERROR(s);
  return pb::CheckpointBeginResponse();
}

StatusOr<pb::CheckpointCommitResponse> Coordinator::CheckpointCommit(
    const pb::CheckpointCommitRequest& request, const Principal& who) {
  absl::MutexLock lock(&mu_);
  SIFT_ASSIGN_OR_RETURN(Job * job,
                        Fence(request.job_id(), request.generation(), who, "CheckpointCommit"));
  SIFT_RETURN_IF_ERROR(CheckRankCaller(*job, 0, who, "CheckpointCommit"));
  if (!request.failed().empty()) {
    // A failed save does not fail the job: it trains on; recovery uses the last good one.
    job->rec.info.set_state(pb::RUNNING);
    const pb::CheckpointRef& last = job->rec.info.last_checkpoint();
    Status s = Log(job, absl::StrCat("checkpoint at step ", request.global_step(),
                                     " FAILED, training goes on (the last good checkpoint is ",
                                     last.dir().empty() ? std::string("none")
                                                        : absl::StrCat("step ", last.global_step(),
                                                                       " in ", last.dir()),
                                     "): ", SanitizeUtf8(request.failed(), 4096)));
    s.Update(Persist(*job));
    SIFT_RETURN_IF_ERROR(s);
    return pb::CheckpointCommitResponse();
  }
  if (request.dir().empty()) return absl::InvalidArgumentError("dir is empty");
  const std::string own = JoinPath(job->spec.checkpoint.dir, job->rec.info.job_id());
  StatusOr<std::string> dir = NormalizedAbsolutePath(request.dir(), "CheckpointCommit dir");
  if (!dir.ok() || *dir != request.dir() || !PathIsUnder(*dir, own) || *dir == own) {
    return AuthRefusal(absl::StatusCode::kPermissionDenied,
                       absl::StrCat("CheckpointCommit: ", request.dir(), " is not under ", own,
                                    ", the job's checkpoint directory: a job commits only its "
                                    "own checkpoints"));
  }
  if (request.epochs_done() < 0 || request.epochs_done() > job->spec.training.epochs ||
      request.global_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("epochs_done ", request.epochs_done(), " (of ",
                                                   job->spec.training.epochs, ") or global_step ",
                                                   request.global_step(), " out of range"));
  }
  // Persisted before the reply: a committed checkpoint is never forgotten.
  JobRecord updated = job->rec;
  pb::CheckpointRef* ref = updated.info.mutable_last_checkpoint();
  ref->set_dir(request.dir());
  ref->set_epochs_done(request.epochs_done());
  ref->set_global_step(request.global_step());
  ref->set_generation(request.generation());
  updated.info.set_state(pb::RUNNING);
  SIFT_RETURN_IF_ERROR(store_->Save(updated));
  job->rec = std::move(updated);
  SIFT_RETURN_IF_ERROR(
      Log(job, absl::StrCat("checkpoint committed at step ", request.global_step(), " (",
                            request.epochs_done(), " epoch(s) done) in ", request.dir())));
  return pb::CheckpointCommitResponse();
}

StatusOr<pb::ReportFailureResponse> Coordinator::ReportFailure(
    const pb::ReportFailureRequest& request, const Principal& who) {
  absl::MutexLock lock(&mu_);
  SIFT_ASSIGN_OR_RETURN(Job * job,
                        Fence(request.job_id(), request.generation(), who, "ReportFailure"));
  SIFT_RETURN_IF_ERROR(CheckRank(*job, request.rank()));
  SIFT_RETURN_IF_ERROR(CheckRankCaller(*job, request.rank(), who, "ReportFailure"));
  const std::string why =
      absl::StrCat("rank ", request.rank(), ": ", SanitizeUtf8(request.message(), 16384));
  SIFT_RETURN_IF_ERROR(request.fatal() ? Finish(job, pb::FAILED, why) : Recover(job, why));
  Schedule();
  return pb::ReportFailureResponse();
}

// ---------------------------------------------------------------------------------------------

void Coordinator::CheckServersReady() {
  Job* job = ActiveJob();
  if (job == nullptr || !IsRunning(job->rec.info.state()) || ServersReady(*job)) return;
  const absl::Duration limit = absl::Milliseconds(options_.lease_ms) * kServersReadyTimeoutLeases;
  if (Now() - job->generation_since < limit) return;
  std::vector<int> silent;
  for (size_t i = 0; i < job->server_ids.size(); ++i) {
    auto it = members_.find(job->server_ids[i]);
    if (it == members_.end() || it->second.running_job != job->rec.info.job_id() ||
        it->second.running_generation != job->rec.info.generation()) {
      silent.push_back(static_cast<int>(i));
    }
  }
  Complain(
      Recover(job, absl::StrCat("embedding server shard", silent.size() > 1 ? "s " : " ",
                                RangesText(silent), " did not report serving generation ",
                                job->rec.info.generation(), " within ", absl::FormatDuration(limit),
                                " (a server of an older sift than the coordinator?)")));
}

void Coordinator::Tick() {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  ExpireLeases();
  CheckServersReady();
  Schedule();
}

void Coordinator::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
}

std::vector<JobMetricsView> Coordinator::JobMetrics() const {
  absl::MutexLock lock(&mu_);
  std::vector<JobMetricsView> out;
  for (const auto& job : jobs_) {
    const pb::JobInfo& info = job->rec.info;
    JobMetricsView v;
    v.job_id = info.job_id();
    v.state = info.state();
    v.samples_total = info.samples_total();
    v.steps_total = job->rec.steps_total;
    v.epoch = info.epoch();
    if (info.epochs_done_size() > 0) {
      v.has_test_auc = true;
      v.test_auc = info.epochs_done(info.epochs_done_size() - 1).test_auc();
    }
    v.last_loss = info.last_loss();
    v.generation = info.generation();
    v.recoveries = info.recoveries();
    out.push_back(v);
  }
  return out;
}

std::map<std::string, int64_t> Coordinator::AliveMembers() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> out = {{"worker", 0}, {"embedding_server", 0}};
  for (const auto& [id, m] : members_) {
    ++out[m.role == pb::WORKER ? "worker" : "embedding_server"];
  }
  return out;
}

}  // namespace sift::coordinator
