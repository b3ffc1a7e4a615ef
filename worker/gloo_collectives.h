// Collectives over Gloo's TCP transport (Debian's libgloo 2022-05 snapshot), with rendezvous
// through a sift::KvStore (FileKvStore now, the coordinator's KV later).
// CreateGlooCollectives blocks until all world_size ranks have joined under the same prefix (or
// the timeout passes). Gloo exceptions never escape: each call returns a Status naming the
// operation, this rank and the peers involved. See worker/collectives.h for the contract.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/kv_store.h"
#include "gloo/rendezvous/store.h"
#include "worker/collectives.h"

namespace sift::worker {

struct GlooOptions {
  // Address to bind and advertise to peers: an IP or a host name that resolves to a non-loopback
  // address in a real cluster (Debian maps the host name to 127.0.1.1). Ignored when `iface` is
  // set (e.g. "eth0"), which binds the interface's address instead.
  std::string hostname = "127.0.0.1";
  std::string iface;
  // Bound on the rendezvous and on every collective (a missing or silent peer surfaces as an
  // error after at most this long; a peer that exits surfaces at once).
  double timeout_s = 60;
  // Before each allreduce/broadcast, a tiny allreduce compares the element counts of all ranks
  // and fails every rank with INVALID_ARGUMENT on a mismatch (instead of a hang or garbage).
  bool check_sizes = true;
};

// world_size 1 returns CreateLocalCollectives() without any rendezvous. `store` must outlive
// the call only (it is used for the rendezvous); `prefix` must be fresh for every rendezvous
// (e.g. "<job>/<generation>"), since store keys are never deleted.
// INVALID_ARGUMENT for a bad rank/world/timeout; DEADLINE_EXCEEDED when the peers do not all
// join in time; UNAVAILABLE when connecting to a peer fails.
StatusOr<std::unique_ptr<Collectives>> CreateGlooCollectives(KvStore* store,
                                                             const std::string& prefix, int rank,
                                                             int world_size,
                                                             const GlooOptions& options);

// gloo::rendezvous::Store over a KvStore, keys joined as "<prefix>/<key>". As Gloo expects,
// get() blocks until the key exists and failures are thrown as gloo::IoException; the underlying
// Status of the first failure is kept (last_error()) so callers can report it exactly.
// wait(keys) without a timeout uses `default_timeout`. Thread-safe.
class KvGlooStore : public gloo::rendezvous::Store {
 public:
  KvGlooStore(KvStore* store, std::string prefix, std::chrono::milliseconds default_timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // OK until an operation failed; then the first failure.
  Status last_error() const;

 private:
  std::string Key(const std::string& key) const;
  [[noreturn]] void Fail(const Status& status);

  KvStore* store_;
  std::string prefix_;
  std::chrono::milliseconds default_timeout_;
  mutable absl::Mutex mu_;
  Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sift::worker
