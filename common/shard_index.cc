#include "common/shard_index.h"

#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sift {
namespace {

bool AllDigits(absl::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

StatusOr<uint32_t> ResolveShardIndex(absl::string_view value, absl::string_view hostname,
                                     uint32_t num_shards) {
  uint32_t index = 0;
  std::string origin;
  if (value == "ordinal") {
    hostname = hostname.substr(0, hostname.find('.'));  // a FQDN's first label is the pod name
    const size_t dash = hostname.rfind('-');
    const absl::string_view suffix =
        dash == absl::string_view::npos ? absl::string_view() : hostname.substr(dash + 1);
    if (!AllDigits(suffix) || !absl::SimpleAtoi(suffix, &index)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shard ordinal: the host name '", hostname,
                       "' does not end in -<number> (a StatefulSet pod's name, e.g. sift-ps-0)"));
    }
    origin = absl::StrCat(" (the ordinal of host '", hostname, "')");
  } else if (!AllDigits(value) || !absl::SimpleAtoi(value, &index)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard: expected a shard index (0, 1, ...) or 'ordinal', got '", value, "'"));
  }
  if (index >= num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("--shard ", index, origin,
                                                   " is out of range: --num-shards is ", num_shards,
                                                   ", so the index must be < ", num_shards));
  }
  return index;
}

std::string LocalHostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

}  // namespace sift
