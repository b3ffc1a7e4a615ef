// Conversions between absl::Status (sift's error values) and grpc::Status at the RPC boundary.
// The canonical codes are the same numbers in both. Header-only: include it only from targets
// that link gRPC (servers and clients), not from the rest of common/.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/status.h"
#include "grpcpp/support/status.h"

namespace sift {

// A handler's result as the gRPC status sent to the client (the message unchanged).
inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// A call's gRPC status as a Status with the same code, its message prefixed by `where` (the
// server and method, e.g. "coordinator localhost:7000 SubmitJob") and the code's name.
// A status without a message (gRPC's own, e.g. a server of another kind answering
// UNIMPLEMENTED) says what that code means here.
inline Status FromGrpc(const grpc::Status& s, const std::string& where) {
  if (s.ok()) return absl::OkStatus();
  const int code = static_cast<int>(s.error_code());
  std::string message = s.error_message();
  if (message.empty()) {
    switch (s.error_code()) {
      case grpc::StatusCode::UNIMPLEMENTED:
        message =
            "the server does not serve this method (is the address the right kind of sift "
            "server, of the same version?)";
        break;
      case grpc::StatusCode::INTERNAL:
        message =
            "the server could not decode the request, or this client its reply (another "
            "protocol or version?)";
        break;
      case grpc::StatusCode::UNAVAILABLE:
        message = "not reachable";
        break;
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        message = "no answer before the deadline";
        break;
      default:
        message = "no message from the server";
    }
  }
  return Status(static_cast<absl::StatusCode>(code),
                absl::StrCat(where, ": ", GrpcServerMetrics::CodeName(code), ": ", message));
}

}  // namespace sift
