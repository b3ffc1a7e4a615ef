#include "cli/stop_signals.h"

#include <atomic>
#include <thread>

#include "common/broken_pipe.h"
#include "common/stop_request.h"

namespace sift::cli {
namespace {

// Threads that exist before StopSignals (a library may start threads when it loads) do not
// block the stop signals, so the kernel may hand one to them; with the default action it would
// kill the process (exit 143). Instead (the phase is an atomic: async-signal-safe):
//   before Wait()  the role is starting: the signal is forwarded to the waiting thread (pending
//                  there, Wait() returns at once) and RequestStop() makes start-up loops that may
//                  block for long (a worker registering with a coordinator) give up at once;
//   in Wait()      forwarded to the waiting thread, which takes it;
//   after Wait()   the role is already stopping: a repeated SIGTERM (Kubernetes, systemd and Slurm
//                  send several) is dropped rather than killing the drain half-way.
enum Phase { kStarting = 0, kWaiting = 1, kStopping = 2 };
std::atomic<int> g_stop_phase{kStarting};
pthread_t g_stop_waiter;

void OnRoleStopSignal(int sig) {
  const int phase = g_stop_phase.load();
  if (phase == kStopping) return;
  if (phase == kStarting) RequestStop();
  pthread_kill(g_stop_waiter, sig);
}

// The process-directed stop signals, taken by a thread of their own (it inherits the blocked mask
// and sigwaits for them), with the same phases as the handler above. Without it a signal sent
// while every thread blocks it (no library started a thread before StopSignals) stays pending
// until Wait(), and a start-up loop (a worker registering with an absent coordinator) would never
// see RequestStop(). It forwards to the waiting thread, whose own sigwait in Wait() takes only
// those thread-directed copies. Detached: it blocks in sigwait until the process exits.
void WatchStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    OnRoleStopSignal(sig);
  }
}

}  // namespace

StopSignals::StopSignals() : waiter_(pthread_self()) {
  IgnoreBrokenPipes();  // a peer that goes away is an error Status, not exit 141
  g_stop_waiter = waiter_;
  g_stop_phase.store(kStarting);
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGUSR2);  // Finish()
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  struct sigaction handler = {};
  handler.sa_handler = OnRoleStopSignal;
  handler.sa_flags = SA_RESTART;
  sigemptyset(&handler.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &handler, nullptr);
  std::thread(WatchStopSignals).detach();
}

const char* StopSignals::Wait() {
  // A signal that reached this thread before Wait() is pending here and returns at once.
  g_stop_phase.store(kWaiting);
  int sig = 0;
  sigwait(&set_, &sig);
  g_stop_phase.store(kStopping);
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "finished";
}

void StopSignals::Finish() { pthread_kill(waiter_, SIGUSR2); }

}  // namespace sift::cli
