#include "worker/worker_metrics.h"

#include <algorithm>

#include "common/metrics.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

namespace sift::worker {

WorkerMetrics::WorkerMetrics(const std::string& version)
    : registry_(std::make_shared<prometheus::Registry>()) {
  samples_ = &prometheus::BuildCounter()
                  .Name("sift_worker_samples_total")
                  .Help("Training samples this worker trained")
                  .Register(*registry_);
  steps_ = &prometheus::BuildCounter()
                .Name("sift_worker_steps_total")
                .Help("Training steps this worker ran")
                .Register(*registry_);
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("sift_worker_step_seconds")
                       .Help("Wall time of one training step on this worker")
                       .Register(*registry_)
                       .Add({}, ExponentialBuckets(0.001, 2, 18));
  loss_ = &prometheus::BuildGauge()
               .Name("sift_worker_loss")
               .Help("Total loss of the last training step (mean over the job's workers)")
               .Register(*registry_)
               .Add({});
  auto& phase = prometheus::BuildCounter()
                    .Name("sift_worker_phase_seconds_total")
                    .Help("Wall time of each phase of the training steps")
                    .Register(*registry_);
  auto add = [&](const char* name) { return &phase.Add({{"phase", name}}); };
  phases_ = {add("load"),     add("dedup"),     add("pull"),      add("forward"),
             add("backward"), add("allreduce"), add("dense_opt"), add("push")};
  AddBuildInfo(*registry_, version);
}

WorkerMetrics::RunSeries& WorkerMetrics::Series(const std::string& job_id, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_pair(job_id, rank);
  auto it = series_.find(key);
  if (it == series_.end()) {
    const std::map<std::string, std::string> labels = {{"job_id", job_id},
                                                       {"rank", std::to_string(rank)}};
    it = series_.emplace(key, RunSeries{&samples_->Add(labels), &steps_->Add(labels)}).first;
  }
  return it->second;
}

void WorkerMetrics::RecordStep(const std::string& job_id, int rank, int64_t samples,
                               const StepReport& step) {
  RunSeries& s = Series(job_id, rank);
  s.samples->Increment(static_cast<double>(samples));
  s.steps->Increment();
  step_seconds_->Observe(std::max(0.0, step.seconds));
  if (step.has_losses) loss_->Set(step.losses.total);
  const PhaseTimes& p = step.phases;
  auto inc = [](prometheus::Counter* c, double v) { c->Increment(std::max(0.0, v)); };
  inc(phases_.load, p.load);
  inc(phases_.dedup, p.dedup);
  inc(phases_.pull, p.pull);
  inc(phases_.forward, p.forward);
  inc(phases_.backward, p.backward);
  inc(phases_.allreduce, p.allreduce);
  inc(phases_.dense_opt, p.dense_opt);
  inc(phases_.push, p.push);
}

}  // namespace sift::worker
