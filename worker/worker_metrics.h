// WorkerMetrics: the Prometheus series of a `sift worker` (docs/ops-notes.md 3):
//   sift_worker_samples_total{job_id,rank}   counter, samples this worker trained
//   sift_worker_steps_total{job_id,rank}     counter, training steps this worker ran
//   sift_worker_step_seconds                 histogram, wall time of a step on this worker
//   sift_worker_phase_seconds_total{phase}   counter, per phase: load, dedup, pull, forward,
//                                            backward, allreduce, dense_opt, push
//   sift_worker_loss                         gauge, the last step's total loss (mean over ranks)
//   sift_build_info{version}
// so sum(rate(sift_worker_samples_total[1m])) is the cluster's samples/s. Owns its registry (the
// MetricsExposer serves it). Thread-safe (prometheus-cpp's metrics are).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/trainer.h"

namespace sift::worker {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(const std::string& version);
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // One step of (job_id, rank): `samples` are this worker's (not the global batch).
  void RecordStep(const std::string& job_id, int rank, int64_t samples, const StepReport& step);

 private:
  struct RunSeries {
    prometheus::Counter* samples = nullptr;
    prometheus::Counter* steps = nullptr;
  };
  RunSeries& Series(const std::string& job_id, int rank);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* samples_ = nullptr;
  prometheus::Family<prometheus::Counter>* steps_ = nullptr;
  prometheus::Histogram* step_seconds_ = nullptr;
  prometheus::Gauge* loss_ = nullptr;
  struct Phases {
    prometheus::Counter *load, *dedup, *pull, *forward, *backward, *allreduce, *dense_opt, *push;
  } phases_{};
  std::mutex mu_;  // guards series_
  std::map<std::pair<std::string, int>, RunSeries> series_;
};

}  // namespace sift::worker
