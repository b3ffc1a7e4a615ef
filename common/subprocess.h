// Subprocess: a child process started with fork + exec, its stdout and stderr appended to a log
// file, optionally killed (SIGKILL) by the kernel when the thread that started it dies
// (PR_SET_PDEATHSIG), and reaped exactly once. The object owns the child: its destructor kills
// (SIGKILL) and reaps a child still running, so no process outlives its owner.
// Not thread-safe: one thread starts, polls and stops a Subprocess. REQUIRES: with
// die_with_parent, the starting thread lives as long as the child should (the death signal
// follows the thread, not the process) — start children from the main thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/status.h"

namespace sift {

// How a child ended.
struct ExitInfo {
  bool signaled = false;  // killed by `signal` (else exited with `code`)
  int code = 0;
  int signal = 0;
  // "exited with code 1", "killed by signal 9".
  std::string Describe() const;
  // The shell's convention: `code`, or 128 + `signal`.
  int ShellCode() const { return signaled ? 128 + signal : code; }
};

struct SubprocessOptions {
  std::vector<std::string> argv;  // argv[0] is the program (a path; no PATH search)
  std::string log_path;           // stdout and stderr appended here ("" = inherit the parent's)
  bool die_with_parent = true;    // PR_SET_PDEATHSIG(SIGKILL), then a getppid() check
  bool new_process_group = true;  // setpgid(0, 0): a terminal's Ctrl-C reaches only the parent
};

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();  // SIGKILL + reap when still running
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Starts the child. stdin is /dev/null; the signal mask and dispositions are reset to the
  // defaults. An exec failure shows as the child exiting with code 127 (its log says why).
  // INVALID_ARGUMENT for an empty argv; INTERNAL when the log cannot be opened or fork fails.
  static StatusOr<Subprocess> Start(const SubprocessOptions& options);

  pid_t pid() const { return pid_; }
  // True between Start and the reaping of the child (by Poll, Wait or Stop).
  bool running() const { return pid_ > 0; }
  // The child's exit when it has ended (reaps it), else false. REQUIRES: running().
  bool Poll(ExitInfo* exit);
  // Blocks until the child ends; reaps it. REQUIRES: running().
  ExitInfo Wait();
  // Sends `sig` (no-op when not running).
  void Signal(int sig) const;
  // SIGTERM, up to `grace` for the exit, then SIGKILL; reaps. Returns how it ended.
  ExitInfo Stop(absl::Duration grace);

 private:
  pid_t pid_ = -1;
};

// Stops many children together: SIGTERM to every running one, up to `grace` in all for them to
// exit, SIGKILL to the rest, reap all. Null entries and finished children are skipped.
void StopAll(const std::vector<Subprocess*>& children, absl::Duration grace);

}  // namespace sift
