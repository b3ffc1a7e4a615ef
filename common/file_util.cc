#include "common/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"

namespace sift {
namespace {

constexpr size_t kBufferSize = 1 << 20;

Status ErrnoError(absl::string_view what, const std::string& path) {
  int e = errno;
  std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  if (e == ENOSPC) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

Status FsyncDir(const std::string& path) {
  // (Not `dir = "."` on an empty string: gcc 12 -O3 reports a false -Wrestrict there, PR 105329.)
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const std::string dir = parent.empty() ? std::string(".") : parent;
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("open directory", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync directory", dir);
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::string> NormalizedAbsolutePath(const std::string& path, absl::string_view what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty path"));
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", path, " has a '..' component (name the directory itself)"));
    }
  }
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, ": ", ec.message()));
  }
  std::string out = p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

bool PathIsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return !path.empty() && path[0] == '/';
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

Status CheckNoSymlinksUnder(const std::string& root, const std::string& path, bool create) {
  if (!PathIsUnder(path, root)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not under ", root));
  }
  std::string cur = root;
  const std::string rest = path.substr(std::min(path.size(), root == "/" ? 1 : root.size() + 1));
  for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
    cur = JoinPath(cur, part);
    struct stat st;
    if (::lstat(cur.c_str(), &st) != 0) {
      if (errno != ENOENT) {
        return absl::FailedPreconditionError(absl::StrCat(cur, ": ", std::strerror(errno)));
      }
      if (!create) return absl::OkStatus();  // nothing below a missing directory exists
      if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::FailedPreconditionError(
            absl::StrCat(cur, ": cannot create directory: ", std::strerror(errno)));
      }
      if (::lstat(cur.c_str(), &st) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(cur, ": ", std::strerror(errno)));
      }
    }
    if (S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(cur, " is a symbolic link: sift never follows one under ", root,
                       " (name the real directory)"));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(cur, " is not a directory"));
    }
  }
  return absl::OkStatus();
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  return absl::OkStatus();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return ErrnoError("read failed", path);
  return ss.str();
}

Status WriteFileAtomic(const std::string& path, absl::string_view data) {
  AtomicFileWriter w;
  SIFT_RETURN_IF_ERROR(w.Open(path));
  SIFT_RETURN_IF_ERROR(w.Append(data));
  return w.Commit();
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

Status AtomicFileWriter::Open(const std::string& path) {
  path_ = path;
  tmp_path_ = absl::StrCat(path, ".tmp.", ::getpid());
  // A leftover or planted entry at the temp name (a symbolic or hard link) goes first; the file
  // is then created, never opened through a link.
  ::unlink(tmp_path_.c_str());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) return ErrnoError("cannot create", tmp_path_);
  size_ = 0;
  buffer_.clear();
  buffer_.reserve(kBufferSize);
  return absl::OkStatus();
}

Status AtomicFileWriter::Flush() {
  const char* p = buffer_.data();
  size_t n = buffer_.size();
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write failed", tmp_path_);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  buffer_.clear();
  return absl::OkStatus();
}

Status AtomicFileWriter::Append(const void* data, size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is not open"));
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + n > kBufferSize) {
    SIFT_RETURN_IF_ERROR(Flush());
    if (n >= kBufferSize) {
      buffer_.assign(p, n);
      size_ += n;
      return Flush();
    }
  }
  buffer_.append(p, n);
  size_ += n;
  return absl::OkStatus();
}

Status AtomicFileWriter::WriteAt(uint64_t offset, const void* data, size_t n) {
  SIFT_RETURN_IF_ERROR(Flush());
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write failed", tmp_path_);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

Status AtomicFileWriter::PadTo(size_t alignment) {
  static const char kZeros[64] = {};
  size_t rem = size_ % alignment;
  if (rem == 0) return absl::OkStatus();
  size_t pad = alignment - rem;
  while (pad > 0) {
    size_t k = std::min(pad, sizeof(kZeros));
    SIFT_RETURN_IF_ERROR(Append(kZeros, k));
    pad -= k;
  }
  return absl::OkStatus();
}

Status AtomicFileWriter::Commit() {
  SIFT_RETURN_IF_ERROR(Flush());
  if (::fsync(fd_) != 0) return ErrnoError("fsync failed", tmp_path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return ErrnoError("close failed", tmp_path_);
  }
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    Status s = ErrnoError("rename failed", path_);
    ::unlink(tmp_path_.c_str());
    return s;
  }
  return FsyncDir(path_);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && size_ > 0) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr && size_ > 0) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = ErrnoError("stat failed", path);
    ::close(fd);
    return s;
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      Status s = ErrnoError("mmap failed", path);
      ::close(fd);
      f.size_ = 0;
      return s;
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

}  // namespace sift
