// HttpGet: a minimal HTTP/1.0 client for loopback and cluster-internal endpoints — reading
// another process's /metrics (`sift bench cluster`) and Prometheus's query API (tests). One GET,
// `Connection: close`, 10 s socket timeouts, chunked bodies decoded. Not a general HTTP client:
// no TLS, no redirects, no proxies. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace sift {

// GET http://host:port/path. Returns the body; UNAVAILABLE when the connection fails, INTERNAL
// for a malformed reply, FAILED_PRECONDITION (with the status line) for a status other than 200.
// Every error names the URL.
StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path);

}  // namespace sift
