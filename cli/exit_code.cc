#include "cli/exit_code.h"

#include <string>
#include "absl/types/optional.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace sift::cli {
namespace {
constexpr char kExitCodePayload[] = "type.sift.dev/exit_code";
}  // namespace

Status WithExitCode(Status s, int code) {
  if (!s.ok()) s.SetPayload(kExitCodePayload, absl::Cord(std::to_string(code)));
  return s;
}

int ExitCodeOf(const Status& s) {
  if (s.ok()) return kExitOk;
  const absl::optional<absl::Cord> payload = s.GetPayload(kExitCodePayload);
  int code = 0;
  if (payload.has_value() && absl::SimpleAtoi(std::string(*payload), &code)) return code;
  return kExitFailed;
}

}  // namespace sift::cli
