// LogWindow: at most `burst` log lines per window of `window` on the steady clock; the lines held
// back are counted and handed to the first line of a later window, so that it can say how many
// were left out. For messages a peer can repeat at will (refusals, failed handshakes). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace sift {

class LogWindow {
 public:
  LogWindow(int burst, std::chrono::steady_clock::duration window)
      : burst_(burst), window_(window) {}

  // Whether to log this line. When a new window starts, *held_back is set to the number of lines
  // held back in the windows before it (0 if none), else left alone.
  bool Admit(int64_t* held_back) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || now - window_start_ >= window_) {
      *held_back = suppressed_;
      started_ = true;
      window_start_ = now;
      logged_in_window_ = 0;
      suppressed_ = 0;
    }
    if (logged_in_window_ >= burst_) {
      ++suppressed_;
      return false;
    }
    ++logged_in_window_;
    return true;
  }

 private:
  const int burst_;
  const std::chrono::steady_clock::duration window_;
  std::mutex mu_;
  bool started_ = false;                                // guarded by mu_
  std::chrono::steady_clock::time_point window_start_;  // guarded by mu_
  int logged_in_window_ = 0;                            // guarded by mu_
  int64_t suppressed_ = 0;                              // guarded by mu_
};

}  // namespace sift
