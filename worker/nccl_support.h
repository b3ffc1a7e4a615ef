// Host-side pieces of the NCCL collectives (worker/nccl_collectives.h) that need neither CUDA nor
// NCCL, so they are built and unit-tested everywhere: the unique-id text encoding used in the
// rendezvous store, and the watchdog wait loop that bounds every non-blocking NCCL step (init,
// each collective, finalize) by a deadline and aborts the communicator on a timeout or an error.
// Thread-safety: the free functions are thread-safe; a WatchdogClock is used by one wait at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/status.h"

namespace sift::worker {

// NCCL_UNIQUE_ID_BYTES of nccl.h (checked against it where NCCL is built).
inline constexpr size_t kNcclUniqueIdBytes = 128;

// Lowercase hex, two characters per byte (the id is binary; the store value is text).
std::string EncodeNcclUniqueId(absl::Span<const uint8_t> id);

// Inverse of EncodeNcclUniqueId (either case accepted). INVALID_ARGUMENT naming `key` when the
// text is not 2 * kNcclUniqueIdBytes hex digits.
StatusOr<std::vector<uint8_t>> DecodeNcclUniqueId(absl::string_view text, absl::string_view key);

// Time source of the watchdog, injectable so that tests control time. SleepFor(zero) yields.
class WatchdogClock {
 public:
  virtual ~WatchdogClock() = default;
  virtual absl::Time Now() = 0;
  virtual void SleepFor(absl::Duration d) = 0;
};

// absl::Now / absl::SleepFor (std::this_thread::yield for a zero duration). Never deleted.
WatchdogClock* RealWatchdogClock();

struct WatchdogOptions {
  absl::Duration timeout = absl::Seconds(60);
  // The first `spin_polls` polls only yield in between (a one-rank collective finishes within
  // microseconds); then sleeps double from min_sleep up to max_sleep.
  int spin_polls = 200;
  absl::Duration min_sleep = absl::Microseconds(10);
  absl::Duration max_sleep = absl::Milliseconds(1);
};

// The pause after poll number `attempt` (0-based): zero while attempt < spin_polls, then
// min_sleep * 2^(attempt - spin_polls) capped at max_sleep.
absl::Duration WatchdogSleep(int attempt, const WatchdogOptions& options);

// One poll of the watched operation: true once it has finished, false while it runs, an error
// when it failed (e.g. ncclCommGetAsyncError reported a peer or network failure).
using WatchdogPoll = absl::FunctionRef<StatusOr<bool>()>;
// Cancels the operation (ncclCommAbort); its Status only adds to the reported error.
using WatchdogAbort = absl::FunctionRef<Status()>;

// Polls until `poll` reports done (OK), fails (abort, then the poll's error prefixed with
// "<what>: "), or options.timeout has passed since the call without it finishing (abort, then
// DEADLINE_EXCEEDED "<what>: not finished within <timeout> ..."). A poll that reports done is
// success even when it comes after the deadline. Never sleeps past the deadline.
// REQUIRES: options.timeout > 0.
Status WaitWithWatchdog(absl::string_view what, const WatchdogOptions& options, WatchdogPoll poll,
                        WatchdogAbort abort, WatchdogClock& clock);

}  // namespace sift::worker
