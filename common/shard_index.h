// The shard index of an embedding server as a launcher gives it: a number, or the word
// "ordinal" — the trailing "-N" of the host name, as a Kubernetes StatefulSet names its pods
// (sift-ps-0, sift-ps-1, ...), so one pod template serves every shard. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace sift {

// `value` is a decimal index or "ordinal" (then `hostname`, up to its first '.', must end in
// "-<digits>": "sift-ps-2.sift-ps.ns.svc.cluster.local" is shard 2); the result
// must be < num_shards. Errors (INVALID_ARGUMENT) quote the value, the host name and the range.
StatusOr<uint32_t> ResolveShardIndex(absl::string_view value, absl::string_view hostname,
                                     uint32_t num_shards);

// This machine's host name (gethostname), "" when it cannot be read.
std::string LocalHostName();

}  // namespace sift
