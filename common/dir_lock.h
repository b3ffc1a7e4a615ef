// DirLock: exclusive ownership of a directory among processes (issue 16: two `sift local` on one
// --work-dir both ran and wrote the same checkpoint and snapshot names). An advisory flock(2) on
// a lock file inside the directory, held while the DirLock lives; the kernel drops it when the
// process dies, so a crashed owner never leaves a stale lock. The file records the owner (pid and
// what it is) for the message a second owner gets. Not inherited by child processes
// (O_CLOEXEC). Move-only; thread-compatible.
#pragma once

#include <string>

#include "common/status.h"

namespace sift {

class DirLock {
 public:
  // Creates `dir` if needed and locks `<dir>/<file>` (default ".sift.lock"). FAILED_PRECONDITION
  // when another owner holds it: "<dir> is in use by <owner> (pid N); ...". `owner` describes
  // this process ("sift local", "coordinator", "embedding server shard 0 of 2").
  static StatusOr<DirLock> Acquire(const std::string& dir, const std::string& owner,
                                   const std::string& file = kDefaultFile);

  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  const std::string& path() const { return path_; }

  static constexpr char kDefaultFile[] = ".sift.lock";

 private:
  DirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace sift
