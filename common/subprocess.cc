#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sift {

std::string ExitInfo::Describe() const {
  if (!signaled) return absl::StrCat("exited with code ", code);
  return absl::StrCat("killed by signal ", signal);
}

namespace {

ExitInfo FromWaitStatus(int status) {
  ExitInfo e;
  if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.signal = WTERMSIG(status);
  } else {
    e.code = WEXITSTATUS(status);
  }
  return e;
}

// Writes a C string with write(2) only (async-signal-safe, for the child before exec).
void WriteRaw(int fd, const char* s) {
  const size_t n = std::strlen(s);
  if (::write(fd, s, n) < 0) return;
}

// The child between fork and exec: only async-signal-safe calls.
[[noreturn]] void ExecChild(char* const* argv, int log_fd, int devnull_fd, pid_t parent,
                            bool die_with_parent, bool new_group) {
  if (new_group) ::setpgid(0, 0);
  if (die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died before prctl: then nobody would ever send the signal.
    if (::getppid() != parent) ::_exit(1);
  }
  // Defaults for every signal (ignored ones would survive exec) and an empty mask.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(devnull_fd, 0);
  if (log_fd >= 0) {
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
  }
  // No descriptor of the parent (sockets, listening ports) leaks into the child.
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
    for (int fd = 3; fd < 4096; ++fd) ::close(fd);  // kernels before 5.9
  }
  ::execv(argv[0], argv);
  WriteRaw(2, "sift: cannot exec ");
  WriteRaw(2, argv[0]);
  WriteRaw(2, ": ");
  WriteRaw(2, ::strerror(errno));
  WriteRaw(2, "\n");
  ::_exit(127);
}

}  // namespace

Subprocess::~Subprocess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    Wait();
  }
}

Subprocess::Subprocess(Subprocess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (running()) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

StatusOr<Subprocess> Subprocess::Start(const SubprocessOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("subprocess: empty argv");
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat(
          options.log_path, ": cannot open for the child's output: ", std::strerror(errno)));
    }
  }
  const int devnull_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_fd < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return absl::InternalError(absl::StrCat("/dev/null: ", std::strerror(errno)));
  }
  // Every signal stays blocked in the child until its dispositions are the defaults: a signal
  // sent right after Start is then acted on as the program expects, not by the parent's handler
  // (or lost to the parent's SIG_IGN).
  sigset_t all, saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ExecChild(argv.data(), log_fd, devnull_fd, parent, options.die_with_parent,
              options.new_process_group);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (log_fd >= 0) ::close(log_fd);
  ::close(devnull_fd);
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("fork for ", options.argv[0], ": ", std::strerror(fork_errno)));
  }
  // Also from the parent, so the group exists before anyone signals it.
  if (options.new_process_group) ::setpgid(pid, pid);
  Subprocess p;
  p.pid_ = pid;
  return p;
}

bool Subprocess::Poll(ExitInfo* exit) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  // r < 0 (ECHILD: reaped elsewhere) counts as ended; nothing more can be learnt.
  *exit = r > 0 ? FromWaitStatus(status) : ExitInfo{};
  pid_ = -1;
  return true;
}

ExitInfo Subprocess::Wait() {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  pid_ = -1;
  return r > 0 ? FromWaitStatus(status) : ExitInfo{};
}

void Subprocess::Signal(int sig) const {
  if (running()) ::kill(pid_, sig);
}

ExitInfo Subprocess::Stop(absl::Duration grace) {
  ExitInfo e;
  if (!running()) return e;
  Signal(SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    if (Poll(&e)) return e;
    absl::SleepFor(absl::Milliseconds(10));
  }
  Signal(SIGKILL);
  return Wait();
}

void StopAll(const std::vector<Subprocess*>& children, absl::Duration grace) {
  for (Subprocess* c : children) {
    if (c != nullptr) c->Signal(SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  ExitInfo e;
  while (absl::Now() < deadline) {
    bool any = false;
    for (Subprocess* c : children) {
      if (c != nullptr && c->running() && !c->Poll(&e)) any = true;
    }
    if (!any) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (Subprocess* c : children) {
    if (c != nullptr && c->running()) {
      c->Signal(SIGKILL);
      c->Wait();
    }
  }
}

}  // namespace sift
