// CoordinatorKvStore: the rendezvous KvStore (common/kv_store.h) backed by the coordinator's KV
// calls — what Gloo (worker/gloo_collectives.h KvGlooStore) and later NCCL use to exchange
// addresses. Keys are used as given (callers pass the generation's kv_prefix). Thread-safe.
#pragma once

#include "common/kv_store.h"
#include "server/coordinator/client.h"

namespace sift::coordinator {

class CoordinatorKvStore : public KvStore {
 public:
  // `client` must outlive the store.
  explicit CoordinatorKvStore(CoordinatorClient* client) : client_(client) {}

  Status Set(absl::string_view key, absl::string_view value) override;
  StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;

 private:
  CoordinatorClient* client_;
};

}  // namespace sift::coordinator
