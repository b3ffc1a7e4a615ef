// What every sift gRPC server shares at the RPC boundary (header-only: include it only from
// targets that link gRPC):
//  - NonEmptyStatusInterceptor: no RPC answers with an empty error message. gRPC itself answers
//    a request it cannot decode with INTERNAL and no text, and a handler's status may be empty;
//    the interceptor fills in what happened, naming the method. Messages are also bounded to
//    kMaxStatusMessageBytes of valid UTF-8 (they travel in an HTTP/2 header, whose receive
//    limit is 8 KiB by default: a longer one would replace the error with a transport error).
//  - AddNonEmptyStatusInterceptor(builder): installs it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/text.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"

namespace sift {

inline constexpr size_t kMaxStatusMessageBytes = 4096;

// The message for a status that came with none.
inline std::string ExplainEmptyStatus(grpc::StatusCode code, const std::string& method) {
  switch (code) {
    case grpc::StatusCode::INTERNAL:
      return absl::StrCat(method,
                          ": the request could not be decoded as this method's message (a "
                          "client of another protocol or version, or corrupt bytes)");
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::StrCat(method, ": this server does not serve that method");
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return absl::StrCat(method,
                          ": the server is out of a resource (threads, memory or a "
                          "size limit); retry later or send less");
    default:
      return absl::StrCat(method, ": failed without a message");
  }
}

class NonEmptyStatusInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit NonEmptyStatusInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method() != nullptr ? info->method() : "?") {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status s = methods->GetSendStatus();
      if (!s.ok()) {
        std::string message = s.error_message().empty()
                                  ? ExplainEmptyStatus(s.error_code(), method_)
                                  : SanitizeUtf8(s.error_message(), kMaxStatusMessageBytes);
        if (message != s.error_message()) {
          methods->ModifySendStatus(grpc::Status(s.error_code(), message, s.error_details()));
        }
      }
    }
    methods->Proceed();
  }

 private:
  std::string method_;
};

class NonEmptyStatusInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new NonEmptyStatusInterceptor(info);
  }
};

inline void AddNonEmptyStatusInterceptor(grpc::ServerBuilder* builder) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<NonEmptyStatusInterceptorFactory>());
  builder->experimental().SetInterceptorCreators(std::move(creators));
}

}  // namespace sift
