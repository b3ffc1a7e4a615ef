#include "common/kv_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"

namespace sift {

KvStore::~KvStore() = default;

namespace {

constexpr size_t kMaxFileName = 255;
// Poll interval of Get/Wait: short enough for a quick rendezvous, long enough to stay cheap.
constexpr absl::Duration kPollInterval = absl::Milliseconds(2);

std::string ErrnoText(int err) { return std::strerror(err); }

// Sleeps for the poll interval, or less when `deadline` is nearer. Returns false when the deadline
// has passed (the caller should stop waiting).
bool SleepUntilNextPoll(absl::Time deadline) {
  absl::Time now = absl::Now();
  if (now >= deadline) return false;
  absl::SleepFor(std::min(kPollInterval, deadline - now));
  return true;
}

absl::Time DeadlineFrom(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(path, ": write failed: ", ErrnoText(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<FileKvStore>> FileKvStore::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("FileKvStore: empty directory path");
  SIFT_RETURN_IF_ERROR(Annotate(MakeDirs(dir), "FileKvStore"));
  return std::unique_ptr<FileKvStore>(new FileKvStore(dir));
}

StatusOr<std::string> FileKvStore::FileNameForKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("kv store: empty key");
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size());
  for (char c : key) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '_' ||
        u == '-') {
      name.push_back(c);
    } else {
      name.push_back('%');
      name.push_back(kHex[u >> 4]);
      name.push_back(kHex[u & 15]);
    }
  }
  if (name.size() > kMaxFileName) {
    return absl::InvalidArgumentError(absl::StrCat("kv store: key of ", key.size(),
                                                   " bytes is too long (escaped file name ",
                                                   name.size(), " > ", kMaxFileName, " bytes)"));
  }
  return name;
}

Status FileKvStore::Set(absl::string_view key, absl::string_view value) {
  SIFT_ASSIGN_OR_RETURN(std::string name, FileNameForKey(key));
  const std::string path = JoinPath(dir_, name);
  // Hidden temp name (escaped key names never start with '.'), unique across processes (pid) and
  // threads (counter), so concurrent writers never share a temp file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = JoinPath(
      dir_, absl::StrCat(".tmp.", ::getpid(), ".", counter.fetch_add(1), ".", name.substr(0, 200)));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", ErrnoText(errno)));
  }
  Status st = WriteAll(fd, value, tmp);
  if (::close(fd) != 0 && st.ok()) {
    st = absl::InternalError(absl::StrCat(tmp, ": close failed: ", ErrnoText(errno)));
  }
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::InternalError(
        absl::StrCat(path, ": rename from ", tmp, " failed: ", ErrnoText(errno)));
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

StatusOr<std::string> FileKvStore::TryRead(const std::string& path) const {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(path);
    return absl::InternalError(absl::StrCat(path, ": cannot open: ", ErrnoText(errno)));
  }
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": read failed: ", ErrnoText(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

StatusOr<std::string> FileKvStore::Get(absl::string_view key, absl::Duration timeout) {
  SIFT_ASSIGN_OR_RETURN(std::string name, FileNameForKey(key));
  const std::string path = JoinPath(dir_, name);
  const absl::Time deadline = DeadlineFrom(timeout);
  while (true) {
    StatusOr<std::string> value = TryRead(path);
    if (value.ok() || !absl::IsNotFound(value.status())) return value;
    if (!SleepUntilNextPoll(deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("kv get '", key, "': not set within ",
                                                      absl::FormatDuration(timeout), " (store ",
                                                      dir_, ")"));
    }
  }
}

Status FileKvStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  std::vector<std::string> paths;
  paths.reserve(keys.size());
  for (const std::string& key : keys) {
    SIFT_ASSIGN_OR_RETURN(std::string name, FileNameForKey(key));
    paths.push_back(JoinPath(dir_, name));
  }
  const absl::Time deadline = DeadlineFrom(timeout);
  size_t next = 0;  // keys before `next` are known to exist (keys are never deleted)
  while (true) {
    struct stat sb;
    while (next < paths.size() && ::stat(paths[next].c_str(), &sb) == 0) ++next;
    if (next == paths.size()) return absl::OkStatus();
    if (!SleepUntilNextPoll(deadline)) {
      std::vector<std::string> missing;
      for (size_t i = next; i < paths.size(); ++i) {
        if (::stat(paths[i].c_str(), &sb) != 0) missing.push_back(absl::StrCat("'", keys[i], "'"));
      }
      if (missing.empty()) return absl::OkStatus();
      return absl::DeadlineExceededError(absl::StrCat(
          "kv wait: ", missing.size(), " of ", keys.size(), " keys not set within ",
          absl::FormatDuration(timeout), " (store ", dir_, "): ", absl::StrJoin(missing, ", ")));
    }
  }
}

}  // namespace sift
