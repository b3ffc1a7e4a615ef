#include "cli/stop_signals.h"

#include <pthread.h>

namespace sift::cli {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

const char* StopSignals::Wait() {
  int sig = 0;
  sigwait(&set_, &sig);
  return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

}  // namespace sift::cli
