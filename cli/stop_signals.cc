#include "cli/stop_signals.h"

namespace sift::cli {

StopSignals::StopSignals() : waiter_(pthread_self()) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGUSR2);  // Finish()
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

const char* StopSignals::Wait() {
  int sig = 0;
  sigwait(&set_, &sig);
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "finished";
}

void StopSignals::Finish() { pthread_kill(waiter_, SIGUSR2); }

}  // namespace sift::cli
