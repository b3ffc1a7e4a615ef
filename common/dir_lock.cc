#include "common/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace sift {

StatusOr<DirLock> DirLock::Acquire(const std::string& dir, const std::string& owner,
                                   const std::string& file) {
  SIFT_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = JoinPath(dir, file);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot open the lock file: ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[512];
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    if (n > 0) holder.assign(buf, static_cast<size_t>(n));
    ::close(fd);
    if (err != EWOULDBLOCK) {
      return absl::InternalError(absl::StrCat(path, ": flock: ", std::strerror(err)));
    }
    holder = std::string(absl::StripAsciiWhitespace(holder));
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is in use by ", holder.empty() ? "another process" : holder,
                     "; one owner at a time (stop it, or choose another directory)"));
  }
  // Ours: record who holds it (for the message above; the lock itself is the flock).
  const std::string me = absl::StrCat(owner, " (pid ", ::getpid(), ")\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  return DirLock(fd, path);
}

DirLock::DirLock(DirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace sift
