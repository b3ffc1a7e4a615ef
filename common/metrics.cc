#include "common/metrics.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "prometheus/check_names.h"
#include "prometheus/client_metric.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/text_serializer.h"

namespace sift {
namespace {

[[noreturn]] void DieBecause(const std::string& what) {
  std::fprintf(stderr, "sift metrics: %s\n", what.c_str());
  std::abort();
}

// Splits "host:port", "[v6]:port" or "port" and checks the pieces. An empty host means all
// interfaces. Names that are not numeric addresses must resolve.
Status CheckBindAddress(const std::string& address) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': ", why,
                     " (expected host:port or port, e.g. 0.0.0.0:9464 or 127.0.0.1:0)"));
  };
  std::string host, port;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    port = address;
  } else {
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.empty()) return bad("empty host before ':'");
  }
  int port_number = -1;
  if (port.empty() ||
      !std::all_of(port.begin(), port.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return bad(absl::StrCat("port '", port, "' is not a number in 0..65535"));
  }
  if (host.empty()) return absl::OkStatus();
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad("unbalanced [ ] around an IPv6 host");
    host = host.substr(1, host.size() - 2);
  }
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' &&
        c != '_') {
      return bad(absl::StrCat("host '", host, "' has a character that is not allowed"));
    }
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) return bad(absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  ::freeaddrinfo(result);
  return absl::OkStatus();
}

constexpr const char* kCodeNames[GrpcServerMetrics::kNumCodes] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

int NormalizeCode(int code) { return code >= 0 && code < GrpcServerMetrics::kNumCodes ? code : 2; }

}  // namespace

// ---- MetricsExposer ----------------------------------------------------------------------------

MetricsExposer::MetricsExposer(std::string bind_address,
                               std::shared_ptr<prometheus::Registry> registry)
    : bind_address_(std::move(bind_address)), registry_(std::move(registry)) {}

namespace {

// Binds a listening TCP socket to `bind_address` ("host:port" or "port"; no host = all
// interfaces). Returns the fd; UNAVAILABLE naming the address when nothing could be bound.
StatusOr<int> Listen(const std::string& bind_address) {
  const size_t colon = bind_address.rfind(':');
  std::string host = colon == std::string::npos ? "" : bind_address.substr(0, colon);
  const std::string port =
      colon == std::string::npos ? bind_address : bind_address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addrs = nullptr;
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &addrs);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics address '", bind_address, "': ", gai_strerror(rc)));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = addrs; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // not SO_REUSEPORT
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(addrs);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("metrics address '", bind_address,
                                               "': cannot listen: ", error,
                                               " (port in use or address not local?)"));
  }
  return fd;
}

// Writes all of `data` (false on an error or timeout).
bool SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

MetricsExposer::~MetricsExposer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& bind_address, std::shared_ptr<prometheus::Registry> registry) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", bind_address, "': null registry"));
  }
  SIFT_RETURN_IF_ERROR(CheckBindAddress(bind_address));
  std::unique_ptr<MetricsExposer> exposer(new MetricsExposer(bind_address, std::move(registry)));
  SIFT_ASSIGN_OR_RETURN(exposer->listen_fd_, Listen(bind_address));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(exposer->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics address '", bind_address, "': getsockname: ", std::strerror(errno)));
  }
  exposer->port_ =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  exposer->wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (exposer->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("metrics: eventfd: ", std::strerror(errno)));
  }
  exposer->thread_ = std::thread([e = exposer.get()] { e->Serve(); });
  return exposer;
}

void MetricsExposer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;  // the destructor
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Answer(fd);
    ::close(fd);
  }
}

std::string MetricsExposer::Exposition() {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& c : collectables_) {
      std::vector<prometheus::MetricFamily> more = c->Collect();
      families.insert(families.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void MetricsExposer::Answer(int fd) {
  // The request head: up to the blank line, at most 16 KiB.
  std::string head;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < (16 << 10)) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
  }
  const size_t line_end = head.find("\r\n");
  std::vector<std::string> parts = absl::StrSplit(head.substr(0, line_end), ' ', absl::SkipEmpty());
  auto reply = [fd](absl::string_view status, absl::string_view type, absl::string_view body,
                    bool send_body) {
    const std::string header =
        absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                     "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
    if (SendAll(fd, header) && send_body) SendAll(fd, body);
  };
  if (line_end == std::string::npos || parts.size() != 3 || parts[2].rfind("HTTP/1.", 0) != 0) {
    reply("400 Bad Request", "text/plain", "bad request\n", true);
    return;
  }
  if (parts[0] != "GET" && parts[0] != "HEAD") {
    reply("405 Method Not Allowed", "text/plain", "only GET and HEAD\n", true);
    return;
  }
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    reply("404 Not Found", "text/plain", "not found: try /metrics\n", true);
    return;
  }
  const std::string body = Exposition();
  reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, parts[0] == "GET");
}

Status MetricsExposer::AddCollectable(std::shared_ptr<prometheus::Collectable> collectable) {
  if (collectable == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics on '", bind_address_, "': null collectable"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  collectables_.push_back(std::move(collectable));
  return absl::OkStatus();
}

// ---- Buckets -----------------------------------------------------------------------------------

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1 || !std::isfinite(start) ||
      !std::isfinite(factor)) {
    DieBecause(absl::StrCat("ExponentialBuckets(start=", start, ", factor=", factor,
                            ", count=", count, "): need start > 0, factor > 1, count >= 1"));
  }
  std::vector<double> bounds(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) bounds[static_cast<size_t>(i)] = start * std::pow(factor, i);
  return bounds;
}

// ---- GrpcServerMetrics -------------------------------------------------------------------------

bool IsUsableLabelName(const std::string& name) {
  static const std::set<std::string> kReserved = {"job", "instance", "le", "quantile"};
  return prometheus::CheckLabelName(name) && name.rfind("__", 0) != 0 && kReserved.count(name) == 0;
}

absl::string_view GrpcServerMetrics::CodeName(int grpc_status_code) {
  return kCodeNames[NormalizeCode(grpc_status_code)];
}

Status GrpcServerMetrics::Validate(const std::string& grpc_service,
                                   const std::vector<std::string>& methods,
                                   const std::map<std::string, std::string>& extra_labels) {
  if (grpc_service.empty()) return absl::InvalidArgumentError("grpc metrics: empty service name");
  if (methods.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpc metrics for ", grpc_service, ": no methods"));
  }
  std::set<std::string> seen;
  for (const std::string& m : methods) {
    if (m.empty() || !seen.insert(m).second) {
      return absl::InvalidArgumentError(absl::StrCat("grpc metrics for ", grpc_service,
                                                     ": empty or duplicate method name '", m,
                                                     "' in [", absl::StrJoin(methods, ", "), "]"));
    }
  }
  for (const auto& [name, value] : extra_labels) {
    if (!IsUsableLabelName(name) || name.rfind("grpc_", 0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("grpc metrics for ", grpc_service, ": label name '", name,
                       "' is invalid or reserved (job, instance, le, quantile, __*, grpc_*)"));
    }
  }
  return absl::OkStatus();
}

namespace {
// Registers the three families and the per-method series. Throws what prometheus-cpp throws.
struct GrpcFamilies {
  prometheus::Family<prometheus::Counter>* started;
  prometheus::Family<prometheus::Counter>* handled;
  prometheus::Family<prometheus::Histogram>* handling;
};
GrpcFamilies RegisterGrpcFamilies(prometheus::Registry& registry) {
  GrpcFamilies f;
  f.started = &prometheus::BuildCounter()
                   .Name("grpc_server_started_total")
                   .Help("RPCs started on the server.")
                   .Register(registry);
  f.handled = &prometheus::BuildCounter()
                   .Name("grpc_server_handled_total")
                   .Help("RPCs completed on the server, by gRPC status code.")
                   .Register(registry);
  f.handling = &prometheus::BuildHistogram()
                    .Name("grpc_server_handling_seconds")
                    .Help("Time from receiving an RPC to finishing it on the server.")
                    .Register(registry);
  return f;
}
}  // namespace

GrpcServerMetrics::GrpcServerMetrics(prometheus::Registry& registry, std::string grpc_service,
                                     std::vector<std::string> methods,
                                     std::map<std::string, std::string> extra_labels)
    : service_(std::move(grpc_service)),
      methods_(std::move(methods)),
      extra_labels_(std::move(extra_labels)),
      handled_(std::make_unique<std::atomic<prometheus::Counter*>[]>(methods_.size() * kNumCodes)) {
  Status valid = Validate(service_, methods_, extra_labels_);
  if (!valid.ok()) DieBecause(std::string(valid.message()));
  try {
    const GrpcFamilies families = RegisterGrpcFamilies(registry);
    handled_family_ = families.handled;
    static const std::vector<double> kBuckets = ExponentialBuckets(0.0001, 2.0, 18);
    for (int m = 0; m < num_methods(); ++m) {
      const prometheus::Labels labels = SeriesLabels(m);
      started_.push_back(&families.started->Add(labels));
      handling_.push_back(&families.handling->Add(labels, kBuckets));
    }
  } catch (const std::exception& e) {
    DieBecause(absl::StrCat("grpc metrics for ", service_, ": ", e.what()));
  }
  // OK series exist from the start so that error ratios have a denominator before any call.
  for (int m = 0; m < num_methods(); ++m) CreateHandled(m, 0);
}

StatusOr<std::unique_ptr<GrpcServerMetrics>> GrpcServerMetrics::Create(
    prometheus::Registry& registry, std::string grpc_service, std::vector<std::string> methods,
    std::map<std::string, std::string> extra_labels) {
  SIFT_RETURN_IF_ERROR(Validate(grpc_service, methods, extra_labels));
  // The constructor aborts on a registry conflict; probe for one here (registering the same
  // families again is a no-op under the registry's default Merge behaviour).
  try {
    RegisterGrpcFamilies(registry);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpc metrics for ", grpc_service, ": ", e.what(), " (grpc_server_* names)"));
  }
  return std::make_unique<GrpcServerMetrics>(registry, std::move(grpc_service), std::move(methods),
                                             std::move(extra_labels));
}

int GrpcServerMetrics::MethodIndex(absl::string_view method) const {
  for (int m = 0; m < num_methods(); ++m) {
    if (methods_[static_cast<size_t>(m)] == method) return m;
  }
  return -1;
}

prometheus::Labels GrpcServerMetrics::SeriesLabels(int method_index) const {
  prometheus::Labels labels = extra_labels_;
  labels["grpc_service"] = service_;
  labels["grpc_method"] = methods_[static_cast<size_t>(method_index)];
  labels["grpc_type"] = "unary";
  return labels;
}

void GrpcServerMetrics::CheckMethod(int method_index) const {
  if (method_index < 0 || method_index >= num_methods()) {
    DieBecause(absl::StrCat("grpc metrics for ", service_, ": method index ", method_index,
                            " outside 0..", num_methods() - 1));
  }
}

prometheus::Counter* GrpcServerMetrics::CreateHandled(int method_index, int code) {
  std::lock_guard<std::mutex> lock(create_mu_);
  std::atomic<prometheus::Counter*>& slot =
      handled_[static_cast<size_t>(method_index) * kNumCodes + static_cast<size_t>(code)];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    prometheus::Labels labels = SeriesLabels(method_index);
    labels["grpc_code"] = kCodeNames[code];
    counter = &handled_family_->Add(labels);  // labels were validated: does not throw
    slot.store(counter, std::memory_order_release);
  }
  return counter;
}

void GrpcServerMetrics::Started(int method_index) {
  CheckMethod(method_index);
  started_[static_cast<size_t>(method_index)]->Increment();
}

void GrpcServerMetrics::Handled(int method_index, int grpc_status_code, double seconds) {
  CheckMethod(method_index);
  const int code = NormalizeCode(grpc_status_code);
  prometheus::Counter* counter =
      handled_[static_cast<size_t>(method_index) * kNumCodes + static_cast<size_t>(code)].load(
          std::memory_order_acquire);
  if (counter == nullptr) counter = CreateHandled(method_index, code);
  counter->Increment();
  // A negative or NaN duration (a caller bug) would poison the histogram's sum: record 0.
  handling_[static_cast<size_t>(method_index)]->Observe(seconds >= 0 ? seconds : 0.0);
}

// ---- CallbackCollectable -----------------------------------------------------------------------

CallbackCollectable::CallbackCollectable(std::string name, std::string help, Type type,
                                         Callback callback)
    : name_(std::move(name)), help_(std::move(help)), type_(type), callback_(std::move(callback)) {}

StatusOr<std::shared_ptr<CallbackCollectable>> CallbackCollectable::Create(std::string name,
                                                                           std::string help,
                                                                           Type type,
                                                                           Callback callback) {
  if (!prometheus::CheckMetricName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("metric name '", name, "' is not valid"));
  }
  const absl::string_view suffix = "_total";
  if (type == Type::kCounter &&
      (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(),
                                                    suffix.data(), suffix.size()) != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter metric '", name, "' must end in _total"));
  }
  if (!callback) {
    return absl::InvalidArgumentError(absl::StrCat("metric '", name, "': empty callback"));
  }
  return std::shared_ptr<CallbackCollectable>(
      new CallbackCollectable(std::move(name), std::move(help), type, std::move(callback)));
}

std::vector<prometheus::MetricFamily> CallbackCollectable::Collect() const {
  prometheus::MetricFamily family;
  family.name = name_;
  family.help = help_;
  family.type =
      type_ == Type::kCounter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
  std::vector<Sample> samples;
  try {
    samples = callback_();
  } catch (const std::exception& e) {
    // Runs on a civetweb thread: an escaping exception would terminate the process.
    std::fprintf(stderr, "sift metrics: callback of %s threw: %s\n", name_.c_str(), e.what());
    samples.clear();
  }
  family.metric.reserve(samples.size());
  for (const auto& [labels, value] : samples) {
    bool usable = true;
    prometheus::ClientMetric metric;
    for (const auto& [label, label_value] : labels) {  // std::map: sorted by name
      usable = usable && IsUsableLabelName(label);
      metric.label.push_back({label, label_value});
    }
    if (!usable) continue;
    if (type_ == Type::kCounter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
  }
  return {std::move(family)};
}

// ---- Build info, serialization ---------------------------------------------------------------

void AddBuildInfo(prometheus::Registry& registry, const std::string& version) {
  try {
    prometheus::BuildGauge()
        .Name("sift_build_info")
        .Help("sift build information; always 1, the version is a label.")
        .Register(registry)
        .Add({{"version", version}})
        .Set(1);
  } catch (const std::exception& e) {
    DieBecause(absl::StrCat("sift_build_info: ", e.what()));
  }
}

std::string SerializeMetrics(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace sift
