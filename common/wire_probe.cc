#include "common/wire_probe.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "openssl/ssl.h"

namespace sift {
namespace {

// "host:port" / "[v6]:port" -> host, port; false when there is no port.
bool SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return !host->empty();
}

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
    if (r == 0) return false;
  }
}

// A connected, non-blocking socket to one of `host:port`'s addresses, or -1.
int ConnectAny(const std::string& host, const std::string& port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &list) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = list; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!ok && errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline)) {
      int err = 0;
      socklen_t len = sizeof(err);
      ok = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    if (!ok) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(list);
  return fd;
}

// True when the server at fd's peer sends a TLS handshake message in answer to a ClientHello.
bool AnswersTls(int fd, const std::string& host, absl::Duration timeout) {
  // Blocking from here, with the timeout on each read and write.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) return false;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout));
  tv.tv_usec = static_cast<suseconds_t>(absl::ToInt64Microseconds(timeout) % 1000000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return false;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  static constexpr unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof(kAlpn));
  SSL* ssl = SSL_new(ctx);
  bool answered = false;
  if (ssl != nullptr) {
    SSL_set_msg_callback(
        ssl, [](int write_p, int, int content_type, const void*, size_t, SSL*, void* arg) {
          if (write_p == 0 && content_type == SSL3_RT_HANDSHAKE) *static_cast<bool*>(arg) = true;
        });
    SSL_set_msg_callback_arg(ssl, &answered);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, host.c_str());
    SSL_connect(ssl);  // its result does not matter: a handshake message seen is enough
    SSL_free(ssl);
  }
  SSL_CTX_free(ctx);
  return answered;
}

}  // namespace

WireProtocol ProbeWireProtocol(const std::string& address, absl::Duration timeout) {
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) return WireProtocol::kUnreachable;
  absl::Time deadline = absl::Now() + timeout;
  int fd = ConnectAny(host, port, deadline);
  if (fd < 0) return WireProtocol::kUnreachable;
  // The HTTP/2 client connection preface (RFC 9113 3.4), then an empty SETTINGS frame.
  static constexpr char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
  const size_t preface_bytes = sizeof(kPreface) - 1;
  size_t sent = 0;
  while (sent < preface_bytes && WaitFor(fd, POLLOUT, deadline)) {
    const ssize_t n = ::send(fd, kPreface + sent, preface_bytes - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  unsigned char head[9] = {};
  size_t got = 0;
  while (got < sizeof(head) && WaitFor(fd, POLLIN, deadline)) {
    const ssize_t n = ::recv(fd, head + got, sizeof(head) - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got >= 4 && head[3] == 0x04) return WireProtocol::kPlaintext;  // SETTINGS
  deadline = absl::Now() + timeout;
  fd = ConnectAny(host, port, deadline);
  if (fd < 0) return WireProtocol::kUnreachable;
  const bool tls = AnswersTls(fd, host, timeout);
  ::close(fd);
  return tls ? WireProtocol::kTls : WireProtocol::kUnknown;
}

std::string TransportMismatchHint(const std::string& address, bool client_tls,
                                  absl::Duration timeout) {
  const WireProtocol p = ProbeWireProtocol(address, timeout);
  if (!client_tls && p == WireProtocol::kTls) {
    return absl::StrCat(
        "TLS/plaintext mismatch: the server at ", address,
        " speaks TLS and this client does not: pass --tls-dir DIR (or set SIFT_TLS_DIR) with the "
        "cluster's ca.crt");
  }
  if (client_tls && p == WireProtocol::kPlaintext) {
    return absl::StrCat("TLS/plaintext mismatch: the server at ", address,
                        " speaks plaintext (it runs without --tls-dir) and this client uses TLS: "
                        "start the server with --tls-dir, or drop --tls-dir / SIFT_TLS_DIR here");
  }
  return "";
}

}  // namespace sift
