// MemberSession: a process's membership in the cluster — Register with the coordinator, then a
// background thread that heartbeats every heartbeat_interval_ms (the coordinator's value). A
// heartbeat NOT_FOUND (the coordinator restarted, or our lease expired) registers again under a
// new member id; UNAVAILABLE is retried on the next beat. Workers read the latest assignment
// and tell the session which (job, generation) they are running, which the next heartbeat
// reports. An embedding server's session hands each new assignment (the job it serves, with its
// credential) to an AssignmentListener, then reports it back as what it serves, and beats again
// at once so that the coordinator can hand the workers theirs. Thread-safe; the destructor stops
// the thread (at most one RPC deadline later).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "common/status.h"
#include "server/coordinator/client.h"

namespace sift::coordinator {

class MemberSession {
 public:
  // Called on the heartbeat thread when the assignment changes (nullopt: none any more), before
  // the session reports it as running (servers).
  using AssignmentListener = std::function<void(const std::optional<pb::Assignment>&)>;

  // Registers `request` (retrying UNAVAILABLE, and ALREADY_EXISTS of a live slot, until
  // `register_timeout`, or until StopRequested(): CANCELLED; FAILED_PRECONDITION at once when the
  // coordinator speaks the other protocol, TLS or plaintext) and starts heartbeating. `client` must
  // outlive the session. For an EMBEDDING_SERVER, the heartbeats report the latest assignment
  // as what it serves, after `listener` saw it.
  static StatusOr<std::unique_ptr<MemberSession>> Start(CoordinatorClient* client,
                                                        const pb::RegisterRequest& request,
                                                        absl::Duration register_timeout,
                                                        AssignmentListener listener = nullptr);
  ~MemberSession();
  MemberSession(const MemberSession&) = delete;
  MemberSession& operator=(const MemberSession&) = delete;

  // The current member id (changes when the session registers again).
  std::string member_id() const;

  // The assignment of the last successful heartbeat (nullopt: none).
  std::optional<pb::Assignment> assignment() const;

  // Waits until the latest heartbeat carries an assignment other than (job_id, generation), or
  // `timeout` passes; returns it (nullopt on timeout).
  std::optional<pb::Assignment> WaitForNewAssignment(const std::string& job_id, int64_t generation,
                                                     absl::Duration timeout);

  // True while the latest heartbeat still assigns (job_id, generation) to this member. False
  // after the coordinator dropped it (recovery, cancel, restart) — the caller must abandon the
  // run — or when no heartbeat succeeded for a whole lease.
  bool StillAssigned(const std::string& job_id, int64_t generation) const;

  // What the next heartbeats report as running ("" / 0 = idle, ready for an assignment).
  void SetRunning(const std::string& job_id, int64_t generation);

  // Sends a heartbeat now (e.g. right after SetRunning("", 0), so the coordinator can schedule
  // without waiting for the next beat). Errors are those of the RPC.
  Status BeatNow();

 private:
  MemberSession(CoordinatorClient* client, pb::RegisterRequest request, AssignmentListener listener)
      : client_(client), request_(std::move(request)), listener_(std::move(listener)) {}
  // Tells the listener (and, for a server, what the heartbeats report) about a changed
  // assignment. REQUIRES: beat_mu_ held, mu_ not held.
  void AssignmentChanged(const std::optional<pb::Assignment>& now);
  Status RegisterOnce();  // REQUIRES: beat_mu_ held
  Status Beat();          // REQUIRES: beat_mu_ held
  void Loop();

  CoordinatorClient* const client_;
  const pb::RegisterRequest request_;
  const AssignmentListener listener_;

  std::mutex beat_mu_;  // serializes Register/Heartbeat calls (thread and BeatNow)

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::string member_id_;
  absl::Duration interval_ = absl::Milliseconds(250);
  absl::Duration lease_ = absl::Seconds(3);
  std::optional<pb::Assignment> assignment_;
  absl::Time last_ok_ = absl::InfinitePast();
  std::string running_job_;
  int64_t running_generation_ = 0;
  bool stop_ = false;
  bool beat_soon_ = false;  // the assignment changed: report it without waiting an interval
  std::thread thread_;
};

}  // namespace sift::coordinator
