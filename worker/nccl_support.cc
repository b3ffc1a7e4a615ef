#include "worker/nccl_support.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace sift::worker {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class RealClock : public WatchdogClock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override {
    if (d <= absl::ZeroDuration()) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(d);
    }
  }
};

}  // namespace

std::string EncodeNcclUniqueId(absl::Span<const uint8_t> id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * id.size());
  for (uint8_t b : id) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

StatusOr<std::vector<uint8_t>> DecodeNcclUniqueId(absl::string_view text, absl::string_view key) {
  if (text.size() != 2 * kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl unique id under key '", key, "': expected ", 2 * kNcclUniqueIdBytes, " hex digits (",
        kNcclUniqueIdBytes, " bytes), got ", text.size(), " characters"));
  }
  std::vector<uint8_t> id(kNcclUniqueIdBytes);
  for (size_t i = 0; i < id.size(); ++i) {
    const int hi = HexValue(text[2 * i]);
    const int lo = HexValue(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      const size_t at = hi < 0 ? 2 * i : 2 * i + 1;
      return absl::InvalidArgumentError(
          absl::StrCat("nccl unique id under key '", key, "': character ", at,
                       " is not a hex digit (byte value ",
                       static_cast<int>(static_cast<unsigned char>(text[at])), ")"));
    }
    id[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return id;
}

WatchdogClock* RealWatchdogClock() {
  static RealClock* const clock = new RealClock();
  return clock;
}

absl::Duration WatchdogSleep(int attempt, const WatchdogOptions& options) {
  if (attempt < options.spin_polls) return absl::ZeroDuration();
  absl::Duration d = options.min_sleep;
  for (int i = options.spin_polls; i < attempt && d < options.max_sleep; ++i) d *= 2;
  return std::min(d, options.max_sleep);
}

Status WaitWithWatchdog(absl::string_view what, const WatchdogOptions& options, WatchdogPoll poll,
                        WatchdogAbort abort, WatchdogClock& clock) {
  const absl::Time deadline = clock.Now() + options.timeout;
  // The abort's own failure, if any, as a suffix of the reported error.
  auto abort_note = [&abort]() -> std::string {
    const Status st = abort();
    return st.ok() ? std::string() : absl::StrCat(" (and the abort failed: ", st.message(), ")");
  };
  for (int attempt = 0;; ++attempt) {
    StatusOr<bool> done = poll();
    if (!done.ok()) {
      const std::string note = abort_note();
      return Status(done.status().code(), absl::StrCat(what, ": ", done.status().message(), note));
    }
    if (*done) return absl::OkStatus();
    const absl::Time now = clock.Now();
    if (now >= deadline) {
      const std::string note = abort_note();
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": not finished within ", absl::FormatDuration(options.timeout),
                       " (a peer did not join or stopped responding); the communicator was "
                       "aborted",
                       note));
    }
    clock.SleepFor(std::min(WatchdogSleep(attempt, options), deadline - now));
  }
}

}  // namespace sift::worker
