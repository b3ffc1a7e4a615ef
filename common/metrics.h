// Prometheus metrics for every sift process: a thin layer over prometheus-cpp 1.0.1.
//
// Naming (docs/ops-notes.md 3.3): sift_ prefix, base units (seconds, bytes), counters end in
// _total, bounded labels only, never job/instance (Prometheus attaches those). One
// prometheus::Registry per process, shared by its components; MetricsExposer serves it over HTTP.
// prometheus-cpp reports misuse (bad names, a name reused with another type) by throwing; the
// functions here turn that into a Status where input can be wrong at run time, and document a
// REQUIRES where the arguments are the program's own constants.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace sift {

// Serves `registry` (and collectables added later) at http://<bind_address>/metrics (GET or HEAD;
// other paths 404). Owns a small HTTP/1.1 server: one thread, one connection at a time,
// `Connection: close`, 5 s socket timeouts (Prometheus scrapes every few seconds at most). It is
// not prometheus-cpp's civetweb Exposer on purpose: Debian's civetweb starts its threads with a
// fixed 100 KiB stack, and glibc carves every loaded library's static TLS out of it. OpenBLAS
// took 60 KiB (a scrape overflowed the stack and killed the process); it is gone since issue 15,
// but a build with the CUDA target links cuBLASLt, whose static TLS alone is 92 KiB (cuBLAS,
// NCCL and cudart add 28 KiB: readelf -l), and civetweb then cannot even start (mg_start fails,
// "null context when constructing CivetServer", seen in `make demo`). Keeps the registry and
// every added collectable alive. Thread-safe.
class MetricsExposer {
 public:
  // bind_address: "host:port" or "port" ("0.0.0.0:9464", "127.0.0.1:0" for an ephemeral port).
  // A malformed address is INVALID_ARGUMENT; an address that cannot be bound (port in use,
  // host not local) is UNAVAILABLE. Both name the address.
  static StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& bind_address, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsExposer();
  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  // The bound TCP port (the ephemeral one when started on port 0).
  int port() const { return port_; }
  const std::string& bind_address() const { return bind_address_; }

  // Also serves `collectable` at /metrics and keeps it alive. INVALID_ARGUMENT for null.
  Status AddCollectable(std::shared_ptr<prometheus::Collectable> collectable);

 private:
  MetricsExposer(std::string bind_address, std::shared_ptr<prometheus::Registry> registry);

  const std::string bind_address_;
  int port_ = 0;
  void Serve();              // the server thread
  void Answer(int fd);       // one connection
  std::string Exposition();  // every family, in the text format

  std::mutex mu_;  // guards collectables_
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  const std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: written by the destructor to end Serve()
  std::thread thread_;
};

// Histogram bucket bounds start, start*factor, ..., start*factor^(count-1).
// REQUIRES: start > 0, factor > 1, count >= 1 (program constants; aborts with a message otherwise).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// gRPC server metrics in the go-grpc-prometheus shape, for unary methods:
//   grpc_server_started_total{grpc_service,grpc_method,grpc_type="unary",<extra>}
//   grpc_server_handled_total{grpc_service,grpc_method,grpc_type,grpc_code="OK"|...,<extra>}
//   grpc_server_handling_seconds histogram {grpc_service,grpc_method,grpc_type,<extra>},
//     buckets 0.0001 s * 2^k up to ~13 s.
// `extra_labels` (e.g. {{"shard","0"}}) go on every series; several instances (other services,
// other shards) can share one registry. Series are created up front (handled: on first use of a
// code), so Started/Handled never call Family::Add on the hot path. Thread-safe, lock-free after
// the first Handled of each (method, code). The registry must outlive this object.
class GrpcServerMetrics {
 public:
  static constexpr int kNumCodes = 17;  // gRPC status codes 0 (OK) .. 16 (UNAUTHENTICATED)

  // Validates the arguments (INVALID_ARGUMENT: empty service or method list, duplicate method,
  // bad or reserved label name) and the registry (a family of the same name with another type).
  static StatusOr<std::unique_ptr<GrpcServerMetrics>> Create(
      prometheus::Registry& registry, std::string grpc_service, std::vector<std::string> methods,
      std::map<std::string, std::string> extra_labels = {});
  // REQUIRES: the arguments pass Create's checks (aborts with the message otherwise). For
  // constant arguments; use Create when they come from input.
  GrpcServerMetrics(prometheus::Registry& registry, std::string grpc_service,
                    std::vector<std::string> methods,
                    std::map<std::string, std::string> extra_labels = {});
  GrpcServerMetrics(const GrpcServerMetrics&) = delete;
  GrpcServerMetrics& operator=(const GrpcServerMetrics&) = delete;

  int num_methods() const { return static_cast<int>(methods_.size()); }
  // Index of `method` in the constructor's list, or -1.
  int MethodIndex(absl::string_view method) const;

  // REQUIRES: 0 <= method_index < num_methods() (aborts otherwise).
  void Started(int method_index);
  // A finished call: its gRPC status code (values outside 0..16 count as UNKNOWN, as gRPC
  // itself maps them) and its handling time in seconds (negative or NaN is recorded as 0).
  void Handled(int method_index, int grpc_status_code, double seconds);

  // "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "UNKNOWN" outside 0..16.
  static absl::string_view CodeName(int grpc_status_code);

 private:
  static Status Validate(const std::string& grpc_service, const std::vector<std::string>& methods,
                         const std::map<std::string, std::string>& extra_labels);
  prometheus::Labels SeriesLabels(int method_index) const;
  prometheus::Counter* CreateHandled(int method_index, int code);
  void CheckMethod(int method_index) const;

  const std::string service_;
  const std::vector<std::string> methods_;
  const std::map<std::string, std::string> extra_labels_;
  prometheus::Family<prometheus::Counter>* handled_family_ = nullptr;
  std::vector<prometheus::Counter*> started_;     // per method
  std::vector<prometheus::Histogram*> handling_;  // per method
  std::mutex create_mu_;                          // serialises CreateHandled
  // [method * kNumCodes + code]; null until first used.
  std::unique_ptr<std::atomic<prometheus::Counter*>[]> handled_;
};

// A metric family whose values are computed at scrape time by a callback (e.g. rows per table).
// Register it with MetricsExposer::AddCollectable. The callback runs on the HTTP server's
// threads, possibly concurrently: it must be thread-safe and cheap. Samples whose label names
// are invalid or reserved (job, instance, le, __*) are left out of the exposition; label sets
// should be distinct and use the same label names.
class CallbackCollectable : public prometheus::Collectable {
 public:
  enum class Type { kGauge, kCounter };
  using Sample = std::pair<std::map<std::string, std::string>, double>;
  using Callback = std::function<std::vector<Sample>()>;

  // INVALID_ARGUMENT for a bad metric name (prometheus::CheckMetricName), a counter whose name
  // does not end in _total, or an empty callback.
  static StatusOr<std::shared_ptr<CallbackCollectable>> Create(std::string name, std::string help,
                                                               Type type, Callback callback);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  CallbackCollectable(std::string name, std::string help, Type type, Callback callback);

  const std::string name_;
  const std::string help_;
  const Type type_;
  const Callback callback_;
};

// True when `name` is a valid label name that sift may set (not job, instance, le, quantile, or
// a __ name).
bool IsUsableLabelName(const std::string& name);

// Adds the gauge sift_build_info{version="<version>"} = 1.
// REQUIRES: no non-gauge family named sift_build_info in `registry`.
void AddBuildInfo(prometheus::Registry& registry, const std::string& version);

// The registry in the Prometheus text exposition format (for tests and debugging).
std::string SerializeMetrics(const prometheus::Registry& registry);

}  // namespace sift
