#include "common/http_client.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sift {
namespace {

// Decodes a "Transfer-Encoding: chunked" body; false when it is malformed.
bool Dechunk(absl::string_view in, std::string* out) {
  out->clear();
  while (true) {
    const size_t eol = in.find("\r\n");
    if (eol == absl::string_view::npos) return false;
    absl::string_view size_field = in.substr(0, eol);
    size_field = size_field.substr(0, size_field.find(';'));  // chunk extensions
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_field), &size)) return false;
    in.remove_prefix(eol + 2);
    if (size == 0) return true;  // trailers, if any, are ignored
    if (in.size() < size + 2) return false;
    out->append(in.data(), size);
    in.remove_prefix(size + 2);
  }
}

}  // namespace

StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path) {
  const std::string where = absl::StrCat("http://", host, ":", port, path);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  const std::string port_str = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &addrs); rc != 0) {
    return absl::UnavailableError(absl::StrCat(where, ": cannot resolve: ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string connect_error = "no address";
  for (addrinfo* a = addrs; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    timeval timeout{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      connect_error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(addrs);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(where, ": connect: ", connect_error));

  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, ":", port,
                                           "\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      const std::string error = std::strerror(errno);
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(where, ": send: ", error));
    }
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string error = std::strerror(errno);
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(where, ": recv: ", error));
    }
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);

  const size_t header_end = reply.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::InternalError(
        absl::StrCat(where, ": reply without a complete header (", reply.size(), " bytes)"));
  }
  const std::vector<std::string> lines =
      absl::StrSplit(absl::string_view(reply).substr(0, header_end), "\r\n");
  const std::vector<std::string> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  int code = 0;
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/") ||
      !absl::SimpleAtoi(status[1], &code)) {
    return absl::InternalError(absl::StrCat(where, ": bad status line '", lines[0], "'"));
  }
  if (code != 200) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": ", lines[0]));
  }
  bool chunked = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string lower = absl::AsciiStrToLower(lines[i]);
    if (absl::StartsWith(lower, "transfer-encoding:") && absl::StrContains(lower, "chunked")) {
      chunked = true;
    }
  }
  std::string body = reply.substr(header_end + 4);
  if (chunked) {
    std::string plain;
    if (!Dechunk(body, &plain)) {
      return absl::InternalError(absl::StrCat(where, ": malformed chunked body"));
    }
    body = std::move(plain);
  }
  return body;
}

}  // namespace sift
