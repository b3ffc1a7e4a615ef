#include "worker/gloo_collectives.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"

namespace sift::worker {

// ---------------------------------------------------------------------------------------------
// KvGlooStore

KvGlooStore::KvGlooStore(KvStore* store, std::string prefix,
                         std::chrono::milliseconds default_timeout)
    : store_(store), prefix_(std::move(prefix)), default_timeout_(default_timeout) {}

std::string KvGlooStore::Key(const std::string& key) const {
  return absl::StrCat(prefix_, "/", key);
}

void KvGlooStore::Fail(const Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok()) first_error_ = status;
  }
  throw gloo::IoException(std::string(status.message()));
}

Status KvGlooStore::last_error() const {
  absl::MutexLock lock(&mu_);
  return first_error_;
}

void KvGlooStore::set(const std::string& key, const std::vector<char>& data) {
  Status st = store_->Set(Key(key), absl::string_view(data.data(), data.size()));
  if (!st.ok()) Fail(st);
}

std::vector<char> KvGlooStore::get(const std::string& key) {
  StatusOr<std::string> value = store_->Get(Key(key), absl::FromChrono(default_timeout_));
  if (!value.ok()) Fail(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void KvGlooStore::wait(const std::vector<std::string>& keys) { wait(keys, default_timeout_); }

void KvGlooStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(Key(k));
  // Gloo passes kNoTimeout (zero) for "no timeout".
  const absl::Duration d =
      timeout == gloo::kNoTimeout ? absl::InfiniteDuration() : absl::FromChrono(timeout);
  Status st = store_->Wait(full, d);
  if (!st.ok()) Fail(st);
}

// ---------------------------------------------------------------------------------------------
// GlooCollectives

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// The exception in flight (call only inside a catch block) as a Status with `context` prefixed.
Status StatusFromCurrentException(const std::string& context) {
  try {
    throw;
  } catch (const gloo::IoException& e) {
    return absl::UnavailableError(absl::StrCat(context, ": ", e.what()));
  } catch (const gloo::InvalidOperationException& e) {
    return absl::FailedPreconditionError(absl::StrCat(context, ": ", e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat(context, ": gloo check failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(context, ": unknown exception"));
  }
}

class GlooCollectives : public Collectives {
 public:
  GlooCollectives(int rank, int world, const GlooOptions& options,
                  std::shared_ptr<gloo::transport::Device> device,
                  std::shared_ptr<gloo::rendezvous::Context> context)
      : rank_(rank),
        world_(world),
        options_(options),
        device_(std::move(device)),
        context_(std::move(context)) {}

  ~GlooCollectives() override {
    context_.reset();  // closes the pairs before the device's I/O thread goes
    device_.reset();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  Status AllreduceSum(absl::Span<float> data) override {
    const std::string op =
        absl::StrCat("allreduce (rank ", rank_, " of ", world_, ", ring: receives from rank ",
                     (rank_ + 1) % world_, ", sends to rank ", (rank_ + world_ - 1) % world_, ")");
    SIFT_RETURN_IF_ERROR(CheckAlive(op));
    SIFT_RETURN_IF_ERROR(CheckSizes(op, data.size()));
    if (data.empty()) return absl::OkStatus();
    return Run(op, [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      // Ring reduce-scatter + allgather: each segment is summed along the ring in an order fixed
      // by (world size, element count, segment size) and the finished segment is copied, not
      // recomputed, to the other ranks -> bit-identical on every rank and every run.
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTag(NextTag());
      gloo::allreduce(opts);
    });
  }

  Status Broadcast(absl::Span<float> data, int root) override {
    if (root < 0 || root >= world_) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast: root ", root, " is outside [0, ", world_, ")"));
    }
    const std::string op =
        rank_ == root
            ? absl::StrCat("broadcast (rank ", rank_, " of ", world_, ", the root)")
            : absl::StrCat("broadcast (rank ", rank_, " of ", world_, ", from root ", root, ")");
    SIFT_RETURN_IF_ERROR(CheckAlive(op));
    SIFT_RETURN_IF_ERROR(CheckSizes(op, data.size()));
    if (data.empty()) return absl::OkStatus();
    return Run(op, [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setRoot(root);
      opts.setTag(NextTag());
      gloo::broadcast(opts);
    });
  }

  Status Barrier() override {
    const std::string op = absl::StrCat("barrier (rank ", rank_, " of ", world_, ")");
    SIFT_RETURN_IF_ERROR(CheckAlive(op));
    return Run(op, [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      gloo::barrier(opts);
    });
  }

 private:
  uint32_t NextTag() { return tag_++; }

  Status CheckAlive(const std::string& op) const {
    if (broken_.ok()) return absl::OkStatus();
    return Status(broken_.code(),
                  absl::StrCat(op, ": the context failed earlier and must be recreated: ",
                               broken_.message()));
  }

  // Runs `fn` (Gloo calls); on an exception the context is dead: remember why and close its
  // connections, so the peers fail at once instead of waiting for their timeout.
  template <typename Fn>
  Status Run(const std::string& op, Fn&& fn) {
    try {
      fn();
      return absl::OkStatus();
    } catch (...) {
      broken_ = StatusFromCurrentException(op);
    }
    context_.reset();
    return broken_;
  }

  // All ranks allreduce {n, -n} with max: a[0] is the largest count, -a[1] the smallest.
  Status CheckSizes(const std::string& op, size_t n) {
    if (!options_.check_sizes) return absl::OkStatus();
    int64_t sizes[2] = {static_cast<int64_t>(n), -static_cast<int64_t>(n)};
    SIFT_RETURN_IF_ERROR(Run(op + " size check", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(sizes, 2);
      opts.setReduceFunction(static_cast<ReduceFn>(&gloo::max<int64_t>));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTag(NextTag());
      gloo::allreduce(opts);
    }));
    if (sizes[0] != -sizes[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": element counts differ across ranks (min ", -sizes[1], ", max ",
                       sizes[0], ", this rank ", n, ")"));
    }
    return absl::OkStatus();
  }

  const int rank_;
  const int world_;
  const GlooOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
  Status broken_;
};

}  // namespace

StatusOr<std::unique_ptr<Collectives>> CreateGlooCollectives(KvStore* store,
                                                             const std::string& prefix, int rank,
                                                             int world_size,
                                                             const GlooOptions& options) {
  SIFT_RETURN_IF_ERROR(ValidateRankAndWorld(rank, world_size));
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: timeout_s must be a positive number, got ", options.timeout_s));
  }
  if (world_size == 1) return CreateLocalCollectives();
  if (store == nullptr) return absl::InvalidArgumentError("gloo: no rendezvous store");
  if (prefix.empty()) return absl::InvalidArgumentError("gloo: empty rendezvous prefix");
  if (options.hostname.empty() && options.iface.empty()) {
    return absl::InvalidArgumentError("gloo: neither a hostname nor an interface to bind");
  }
  const auto timeout = std::chrono::milliseconds(
      std::max<int64_t>(1, static_cast<int64_t>(std::llround(options.timeout_s * 1000))));
  const std::string where =
      options.iface.empty() ? options.hostname : absl::StrCat("interface ", options.iface);
  const std::string op = absl::StrCat("gloo rendezvous (rank ", rank, " of ", world_size,
                                      ", prefix '", prefix, "', bind ", where, ")");

  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    if (options.iface.empty()) {
      attr.hostname = options.hostname;
    } else {
      attr.iface = options.iface;
    }
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (...) {
    return StatusFromCurrentException(absl::StrCat(op, ": creating the TCP device"));
  }

  KvGlooStore gloo_store(store, prefix, timeout);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
  try {
    context->setTimeout(timeout);
    context->connectFullMesh(gloo_store, device);
  } catch (...) {
    Status st = StatusFromCurrentException(op);
    context.reset();
    // A store failure (e.g. DEADLINE_EXCEEDED: a peer never joined) is reported as itself.
    Status store_error = gloo_store.last_error();
    if (!store_error.ok()) return Annotate(store_error, op);
    return st;
  }
  return std::unique_ptr<Collectives>(
      new GlooCollectives(rank, world_size, options, std::move(device), std::move(context)));
}

}  // namespace sift::worker
