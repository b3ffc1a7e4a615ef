#include "server/coordinator/coordinator_kv_store.h"

#include <string>
#include <vector>

namespace sift::coordinator {

Status CoordinatorKvStore::Set(absl::string_view key, absl::string_view value) {
  if (key.empty()) return absl::InvalidArgumentError("KvStore::Set: empty key");
  return client_->KvSet(std::string(key), std::string(value));
}

StatusOr<std::string> CoordinatorKvStore::Get(absl::string_view key, absl::Duration timeout) {
  if (key.empty()) return absl::InvalidArgumentError("KvStore::Get: empty key");
  SIFT_ASSIGN_OR_RETURN(std::vector<std::string> values,
                        client_->KvGet({std::string(key)}, timeout));
  return std::move(values[0]);
}

Status CoordinatorKvStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  if (keys.empty()) return absl::OkStatus();
  return client_->KvGet(std::vector<std::string>(keys.begin(), keys.end()), timeout).status();
}

}  // namespace sift::coordinator
