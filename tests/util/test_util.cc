#include "tests/util/test_util.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace sift::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sift_test_XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  if (p == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    return;
  }
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

namespace {
std::string Slurp(int fd) {
  std::string s;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) s.append(buf, static_cast<size_t>(n));
  return s;
}
}  // namespace

namespace {
// In a forked child: stdout/stderr to the given files, stdin from /dev/null, exec argv[0].
[[noreturn]] void Exec(const std::vector<std::string>& args, int out_fd, int err_fd) {
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, 0);
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(copy[0].c_str(), argv.data());
  ::_exit(127);
}

// The built sift binary followed by `args`.
std::vector<std::string> SiftArgv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {SIFT_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}
}  // namespace

RunResult RunSift(const std::vector<std::string>& args) {
  RunResult r;
  char out_tmpl[] = "/tmp/sift_out_XXXXXX";
  char err_tmpl[] = "/tmp/sift_err_XXXXXX";
  int out_fd = ::mkstemp(out_tmpl), err_fd = ::mkstemp(err_tmpl);
  pid_t pid = ::fork();
  if (pid == 0) {
    Exec(SiftArgv(args), out_fd, err_fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  ::lseek(out_fd, 0, SEEK_SET);
  ::lseek(err_fd, 0, SEEK_SET);
  r.out = Slurp(out_fd);
  r.err = Slurp(err_fd);
  ::close(out_fd);
  ::close(err_fd);
  ::unlink(out_tmpl);
  ::unlink(err_tmpl);
  return r;
}

SiftProcess::SiftProcess(const std::vector<std::string>& args, const std::string& log_prefix)
    : BackgroundProcess(SiftArgv(args), log_prefix) {}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv,
                                     const std::string& log_prefix)
    : prefix_(log_prefix) {
  const int out_fd = ::open((prefix_ + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open((prefix_ + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_ = ::fork();
  if (pid_ == 0) {
    Exec(argv, out_fd, err_fd);
  }
  ::close(out_fd);
  ::close(err_fd);
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0) Stop(SIGKILL);
}

int BackgroundProcess::Stop(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int BackgroundProcess::WaitExit(double timeout_s) {
  if (pid_ <= 0) return -1;
  for (double waited = 0;; waited += 0.05) {  // checks at least once (timeout 0: a poll)
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (waited >= timeout_s) return -1;
    ::usleep(50000);
  }
}

int BackgroundProcess::PeekExit() const {
  if (pid_ <= 0) return -1;
  siginfo_t info{};
  if (::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid_) {
    return -1;
  }
  return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
}

std::string BackgroundProcess::Out() const { return ReadAll(prefix_ + ".out"); }
std::string BackgroundProcess::Err() const { return ReadAll(prefix_ + ".err"); }

std::string WaitForFile(const std::string& path, double timeout_s) {
  for (double waited = 0; waited < timeout_s; waited += 0.02) {
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > 0 && !ec) {
      std::ifstream in(path, std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      return ss.str();
    }
    ::usleep(20000);
  }
  return "";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out.good()) << "cannot write " << path;
  out << data;
}

namespace {
// The absolute path of `program` on $PATH, or "".
std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", program);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}
}  // namespace

bool PromtoolAvailable() { return !FindOnPath("promtool").empty(); }

StatusOr<std::string> PromtoolCheckMetrics(const std::string& exposition) {
  const std::string promtool = FindOnPath("promtool");
  if (promtool.empty()) return absl::NotFoundError("promtool is not on PATH");
  // stdin from a temporary file and output into another: no pipe to deadlock on.
  char in_tmpl[] = "/tmp/sift_promtool_in_XXXXXX";
  char out_tmpl[] = "/tmp/sift_promtool_out_XXXXXX";
  const int in_fd = ::mkstemp(in_tmpl);
  const int out_fd = ::mkstemp(out_tmpl);
  if (in_fd < 0 || out_fd < 0) return absl::InternalError("mkstemp failed for promtool files");
  ::unlink(in_tmpl);
  ::unlink(out_tmpl);
  for (size_t done = 0; done < exposition.size();) {
    const ssize_t n = ::write(in_fd, exposition.data() + done, exposition.size() - done);
    if (n <= 0) {
      ::close(in_fd);
      ::close(out_fd);
      return absl::InternalError("cannot write promtool input");
    }
    done += static_cast<size_t>(n);
  }
  ::lseek(in_fd, 0, SEEK_SET);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    const char* argv[] = {promtool.c_str(), "check", "metrics", nullptr};
    ::execv(promtool.c_str(), const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  ::lseek(out_fd, 0, SEEK_SET);
  const std::string output = Slurp(out_fd);
  ::close(in_fd);
  ::close(out_fd);
  if (pid < 0) return absl::InternalError("fork failed for promtool");
  const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("promtool check metrics exited with ", exit_code, ":\n", output));
  }
  return output;
}

}  // namespace sift::testing
