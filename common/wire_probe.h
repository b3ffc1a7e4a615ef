// What speaks at a gRPC address: TLS or plaintext HTTP/2. Used to turn a bare "UNAVAILABLE" /
// "Socket closed" / handshake failure into a message that names a TLS/plaintext mismatch
// (a client without --tls-dir against a TLS server, or the other way round).
//
// The probe connects over TCP twice at most: first it sends the HTTP/2 client connection preface;
// a plaintext gRPC server answers with a SETTINGS frame (kPlaintext). Otherwise it starts a TLS
// handshake (OpenSSL, no verification, nothing sent after it): any TLS handshake message from the
// server means kTls. POSIX sockets and libssl, no gRPC; blocking, each connection bounded by
// `timeout`; thread-safe. Part of sift_grpc_security.
#pragma once

#include <string>

#include "absl/time/time.h"

namespace sift {

enum class WireProtocol {
  kUnreachable,  // no TCP connection (nothing listens, or no route)
  kTls,          // the server answered a TLS ClientHello with a handshake message
  kPlaintext,    // the server answered the HTTP/2 preface with a SETTINGS frame
  kUnknown,      // connected, but the answer was neither (or none within the timeout)
};

// `address`: "host:port" or "[v6]:port". kUnreachable also for an address it cannot parse.
WireProtocol ProbeWireProtocol(const std::string& address, absl::Duration timeout);

// "" unless the server at `address` speaks the other protocol than the client (`client_tls`:
// the client uses TLS); else one sentence that names the mismatch and the flag that fixes it,
// for appending to a connection error.
std::string TransportMismatchHint(const std::string& address, bool client_tls,
                                  absl::Duration timeout = absl::Seconds(1));

}  // namespace sift
