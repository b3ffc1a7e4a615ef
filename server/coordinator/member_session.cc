#include "server/coordinator/member_session.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/stop_request.h"

namespace sift::coordinator {

StatusOr<std::unique_ptr<MemberSession>> MemberSession::Start(CoordinatorClient* client,
                                                              const pb::RegisterRequest& request,
                                                              absl::Duration register_timeout,
                                                              AssignmentListener listener) {
  std::unique_ptr<MemberSession> s(new MemberSession(client, request, std::move(listener)));
  const absl::Time deadline = absl::Now() + register_timeout;
  bool probed = false;
  while (true) {
    Status st;
    {
      std::lock_guard<std::mutex> beat(s->beat_mu_);
      st = s->RegisterOnce();
    }
    if (st.ok()) break;
    // ALREADY_EXISTS (security on): our certificate's slot is held by a live member — this
    // process's predecessor, killed before its lease ran out: it frees at the lease's end.
    if (!absl::IsUnavailable(st) && !absl::IsDeadlineExceeded(st) && !absl::IsAlreadyExists(st)) {
      return st;
    }
    // A TLS/plaintext mismatch does not go away by waiting: named at the first failure.
    if (!probed && absl::IsUnavailable(st)) {
      probed = true;
      if (std::string hint = client->TransportHint(); !hint.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot register with the coordinator at ", client->address(), ": ", hint));
      }
    }
    if (absl::Now() >= deadline) {
      return Annotate(st, absl::StrCat("registering with the coordinator for ",
                                       absl::FormatDuration(register_timeout)));
    }
    if (StopRequested()) {
      return absl::CancelledError(absl::StrCat(
          "stopped by a signal while registering with the coordinator (last: ", st.message(), ")"));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

MemberSession::~MemberSession() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status MemberSession::RegisterOnce() {
  SIFT_ASSIGN_OR_RETURN(pb::RegisterResponse r, client_->Register(request_));
  bool had_assignment = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    member_id_ = r.member_id();
    if (r.heartbeat_interval_ms() > 0) interval_ = absl::Milliseconds(r.heartbeat_interval_ms());
    if (r.lease_ms() > 0) lease_ = absl::Milliseconds(r.lease_ms());
    had_assignment = assignment_.has_value();
    assignment_.reset();
    last_ok_ = absl::Now();
    cv_.notify_all();
  }
  if (had_assignment) AssignmentChanged(std::nullopt);
  return absl::OkStatus();
}

void MemberSession::AssignmentChanged(const std::optional<pb::Assignment>& now) {
  if (listener_) listener_(now);
  if (request_.role() != pb::EMBEDDING_SERVER) return;
  std::lock_guard<std::mutex> l(mu_);
  running_job_ = now.has_value() ? now->job_id() : std::string();
  running_generation_ = now.has_value() ? now->generation() : 0;
  beat_soon_ = true;
  cv_.notify_all();
}

Status MemberSession::Beat() {
  pb::HeartbeatRequest req;
  {
    std::lock_guard<std::mutex> l(mu_);
    req.set_member_id(member_id_);
    req.set_running_job_id(running_job_);
    req.set_running_generation(running_generation_);
  }
  StatusOr<pb::HeartbeatResponse> r = client_->Heartbeat(req);
  if (absl::IsNotFound(r.status())) {
    // Our lease is gone (coordinator restart or a long pause): join again as a new member.
    return RegisterOnce();
  }
  if (!r.ok()) return r.status();
  std::optional<pb::Assignment> now;
  if (r->has_assignment()) now = r->assignment();
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    changed = now.has_value() != assignment_.has_value() ||
              (now.has_value() && (now->job_id() != assignment_->job_id() ||
                                   now->generation() != assignment_->generation() ||
                                   now->job_credential() != assignment_->job_credential()));
    assignment_ = now;
    last_ok_ = absl::Now();
    cv_.notify_all();
  }
  if (changed) AssignmentChanged(now);
  return absl::OkStatus();
}

Status MemberSession::BeatNow() {
  std::lock_guard<std::mutex> beat(beat_mu_);
  return Beat();
}

void MemberSession::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, absl::ToChronoMilliseconds(interval_), [this] { return stop_ || beat_soon_; });
    if (stop_) break;
    beat_soon_ = false;
    l.unlock();
    Status st;
    {
      std::lock_guard<std::mutex> beat(beat_mu_);
      st = Beat();
    }
    // UNAVAILABLE / DEADLINE_EXCEEDED: the coordinator is away (restarting); CANCELLED: the
    // process is shutting down. The next beat retries either way.
    if (!st.ok() && !absl::IsUnavailable(st) && !absl::IsDeadlineExceeded(st) &&
        !absl::IsCancelled(st)) {
      std::fprintf(stderr, "sift: heartbeat: %s\n", st.ToString().c_str());
    }
    l.lock();
  }
}

std::string MemberSession::member_id() const {
  std::lock_guard<std::mutex> l(mu_);
  return member_id_;
}

std::optional<pb::Assignment> MemberSession::assignment() const {
  std::lock_guard<std::mutex> l(mu_);
  return assignment_;
}

std::optional<pb::Assignment> MemberSession::WaitForNewAssignment(const std::string& job_id,
                                                                  int64_t generation,
                                                                  absl::Duration timeout) {
  std::unique_lock<std::mutex> l(mu_);
  const auto differs = [&] {
    return assignment_.has_value() &&
           (assignment_->job_id() != job_id || assignment_->generation() != generation);
  };
  cv_.wait_for(l, absl::ToChronoMilliseconds(timeout), [&] { return stop_ || differs(); });
  if (!differs()) return std::nullopt;
  return assignment_;
}

bool MemberSession::StillAssigned(const std::string& job_id, int64_t generation) const {
  std::lock_guard<std::mutex> l(mu_);
  if (absl::Now() - last_ok_ > lease_) return false;
  return assignment_.has_value() && assignment_->job_id() == job_id &&
         assignment_->generation() == generation;
}

void MemberSession::SetRunning(const std::string& job_id, int64_t generation) {
  std::lock_guard<std::mutex> l(mu_);
  running_job_ = job_id;
  running_generation_ = generation;
}

}  // namespace sift::coordinator
