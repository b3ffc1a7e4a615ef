#include "common/data/line_scan.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>

#include "absl/strings/str_format.h"

namespace sift::data {
namespace {
constexpr size_t kReadChunk = size_t{1} << 20;
}  // namespace

namespace {
Status OpenError(const std::string& path, int err) {
  return Status(err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kFailedPrecondition,
                absl::StrCat(path, ": cannot open: ", std::strerror(err)));
}
}  // namespace

StatusOr<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenError(path, errno);
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  if (!S_ISREG(st.st_mode)) {
    // The importers read a file more than once (its header, then its rows; Amazon's two passes):
    // a pipe would lose what the first read took.
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": not a regular file (a pipe or a device?): sift reads its input "
                     "more than once; write it to a file first (gzip is read directly)"));
  }
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return OpenError(path, errno);
  gzbuffer(gz, 1u << 18);
  std::unique_ptr<LineReader> r(new LineReader());
  r->path_ = path;
  r->gz_ = gz;
  r->buf_.resize(kReadChunk);
  return r;
}

LineReader::~LineReader() {
  if (gz_ != nullptr) gzclose_r(static_cast<gzFile>(gz_));
}

Status LineReader::Fill() {
  gzFile gz = static_cast<gzFile>(gz_);
  const int n = gzread(gz, buf_.data(), static_cast<unsigned>(buf_.size()));
  int errnum = Z_OK;
  const char* msg = gzerror(gz, &errnum);
  if (n < 0 || (errnum != Z_OK)) {
    // zlib reports a truncated gzip stream as Z_BUF_ERROR with a short (or zero) read.
    return absl::DataLossError(absl::StrCat(
        path_, ": read error after line ", line_number_, ": ", msg ? msg : "unknown zlib error",
        errnum == Z_BUF_ERROR ? " (truncated gzip file?)" : ""));
  }
  begin_ = 0;
  end_ = static_cast<size_t>(n);
  if (n == 0) eof_ = true;
  return Status();
}

StatusOr<bool> LineReader::Next(absl::string_view* line, bool* overlong) {
  carry_.clear();
  *overlong = false;
  while (true) {
    if (begin_ < end_) {
      const char* start = buf_.data() + begin_;
      const size_t avail = end_ - begin_;
      const void* nl = std::memchr(start, '\n', avail);
      const size_t len = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : avail;
      if (nl != nullptr && carry_.empty() && !*overlong) {
        *line = absl::string_view(start, len);
      } else {
        const size_t room = kMaxLineBytes - carry_.size();
        carry_.append(start, std::min(len, room));
        if (len > room) *overlong = true;
        *line = carry_;
      }
      begin_ += len + (nl ? 1 : 0);
      if (nl != nullptr) {
        if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
        ++line_number_;
        return true;
      }
    }
    if (eof_) {
      if (carry_.empty() && !*overlong) return false;
      *line = carry_;
      if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
      ++line_number_;
      return true;
    }
    SIFT_RETURN_IF_ERROR(Fill());
  }
}

std::vector<std::string> FileReport::BadLineMessages() const {
  std::vector<std::string> out;
  for (const BadLine& b : first_bad) out.push_back(absl::StrCat(path, ":", b.line, ": ", b.what));
  return out;
}

Status CheckBadFraction(const FileReport& r, double max_fraction) {
  const int64_t candidates = r.lines - r.header_lines - r.empty_lines;
  if (r.bad_lines == 0 || candidates == 0) return Status();
  const double fraction = static_cast<double>(r.bad_lines) / static_cast<double>(candidates);
  if (fraction <= max_fraction) return Status();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %d of %d non-empty lines are bad (%.4g%%, more than the allowed %.4g%%); first: line "
      "%d: %s",
      r.path, r.bad_lines, candidates, 100 * fraction, 100 * max_fraction, r.first_bad[0].line,
      r.first_bad[0].what));
}

}  // namespace sift::data
