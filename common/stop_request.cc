#include "common/stop_request.h"

#include <atomic>

namespace sift {
namespace {

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

}  // namespace

void RequestStop() { g_stop_requested.store(true); }
bool StopRequested() { return g_stop_requested.load(); }

}  // namespace sift
