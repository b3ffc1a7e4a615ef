// StopSignals: how a long-running role (coordinator, embedding server, worker) waits for SIGINT
// or SIGTERM. Construct it before any thread starts: it blocks both signals in the calling
// thread, so every thread started later inherits the mask and only Wait() receives them (through
// a watcher thread of its own that takes the process-directed signals and forwards them).
// A stop signal before Wait() is kept for it (and sets common/stop_request.h's flag, which makes
// start-up loops give up); once the role stops, repeated SIGINT/SIGTERM are ignored
// (stop_signals.cc says why). SIGUSR2 is Finish()'s: directed at the waiting thread only.
// It also ignores SIGPIPE (common/broken_pipe.h): a peer that goes away fails the role's write
// with EPIPE (an error Status) instead of killing the role with exit 141.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace sift::cli {

class StopSignals {
 public:
  StopSignals();
  // Blocks until SIGINT or SIGTERM arrives, or Finish() is called; returns the signal's name
  // ("SIGINT" / "SIGTERM"), or "finished".
  const char* Wait();
  // Wakes Wait() from another thread of this process (the role finished its work by itself).
  // The wake-up is directed at the constructing thread, which blocks it: harmless if that thread
  // is no longer waiting.
  void Finish();

 private:
  sigset_t set_;
  pthread_t waiter_;
};

}  // namespace sift::cli
