// StopSignals: how a long-running role (coordinator, embedding server, worker) waits for SIGINT
// or SIGTERM. Construct it before any thread starts: it blocks both signals in the calling
// thread, so every thread started later inherits the mask and only Wait() receives them.
#pragma once

#include <signal.h>

namespace sift::cli {

class StopSignals {
 public:
  StopSignals();
  // Blocks until SIGINT or SIGTERM arrives; returns its name ("SIGINT" / "SIGTERM").
  const char* Wait();

 private:
  sigset_t set_;
};

}  // namespace sift::cli
