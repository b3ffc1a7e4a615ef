// sift bench loader DIR: samples/s of batch materialisation (docs/benchmarks.md). Parses flags,
// runs data::RunLoaderBenchmark, prints the numbers with the machine, build and command, and
// optionally writes them as one JSON object.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "common/data/dataset.h"
#include "common/data/loader.h"
#include "common/file_util.h"
#include "common/sysinfo.h"
#include "nlohmann/json.hpp"

namespace sift::cli {
namespace {

struct BenchLoaderFlags {
  std::string dir;
  int threads = 0;
  int64_t batch_size = 4096;
  int64_t steps = 200;
  int64_t warmup = 10;
  int max_history = 100;
  int short_history = 10;
  bool long_negatives = false;
  int64_t hard_search_window = 0;
  std::string split = "train";
  std::string order = "shuffled";
  uint64_t seed = 1;
  int prefetch = 2;
  int64_t reference_prebatch = 0;
  std::string json;
};

Status RunBenchLoader(const BenchLoaderFlags& flags) {
  data::BatchLoaderOptions opt;
  SIFT_ASSIGN_OR_RETURN(opt.split, data::ParseSplit(flags.split));
  SIFT_ASSIGN_OR_RETURN(opt.order, data::ParseSampleOrder(flags.order));
  opt.batch_size = flags.batch_size;
  opt.history.max_history = flags.max_history;
  opt.history.short_history = flags.short_history;
  opt.history.long_negatives = flags.long_negatives;
  opt.history.hard_search_window = flags.hard_search_window;
  opt.seed = flags.seed;
  opt.threads = flags.threads;
  opt.prefetch = flags.prefetch;
  opt.reference_prebatch = flags.reference_prebatch;
  opt.drop_remainder = true;

  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<data::Dataset> ds, data::Dataset::Open(flags.dir));
  // The hard-search index is built once per opened dataset, before the loader: timed apart.
  double index_seconds = 0;
  if (opt.history.hard_search_window > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    SIFT_RETURN_IF_ERROR(ds->samples().PrepareHardSearch());
    index_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Validate before printing anything, so a bad flag gives just the one error line.
  SIFT_RETURN_IF_ERROR(data::ValidateBatchLoaderOptions(ds->samples(), opt));
  const MachineInfo machine = GetMachineInfo();
  const int64_t n = ds->samples().NumSamples(opt.split);
  std::printf("sift bench loader\n");
  std::printf("  command:    %s\n", CommandLine().c_str());
  std::printf("  machine:    %s, %d CPUs, host %s\n", machine.cpu_model.c_str(), machine.cpus,
              machine.hostname.c_str());
  std::printf("  build:      %s\n", SIFT_BUILD_TYPE);
  std::printf("  dataset:    %s (%s), %s split: %lld samples\n", flags.dir.c_str(),
              ds->source_type().c_str(), data::SplitName(opt.split), static_cast<long long>(n));
  std::fflush(stdout);

  SIFT_ASSIGN_OR_RETURN(data::LoaderBenchmarkResult r,
                        data::RunLoaderBenchmark(&ds->samples(), opt, flags.steps, flags.warmup));
  const double sps = r.samples_per_second();
  const double per_thread = sps / r.threads;
  const double per_cpu_second = r.cpu_seconds > 0 ? r.samples / r.cpu_seconds : 0;
  std::printf(
      "  loader:     order %s, batch %lld, max_history %d (short %d%s), threads %d, "
      "prefetch %d\n",
      data::SampleOrderName(opt.order), static_cast<long long>(opt.batch_size),
      opt.history.max_history, opt.history.short_history,
      opt.history.long_negatives ? ", long negatives" : "", r.threads, opt.prefetch);
  std::printf(
      "  timed:      %lld batches (%lld warm-up excluded), %lld samples, %.3f s wall, "
      "%.3f s CPU, %lld epoch(s) started\n",
      static_cast<long long>(r.steps), static_cast<long long>(r.warmup_steps),
      static_cast<long long>(r.samples), r.seconds, r.cpu_seconds,
      static_cast<long long>(r.epochs));
  if (opt.history.hard_search_window > 0) {
    const auto* tl = dynamic_cast<const data::TimelineSamples*>(&ds->samples());
    std::printf(
        "  hard search: window %lld events, K = %d slots; index built in %.2f s (%.1f MB)\n",
        static_cast<long long>(opt.history.hard_search_window),
        opt.history.max_history - opt.history.short_history, index_seconds,
        tl != nullptr && tl->category_index() != nullptr
            ? static_cast<double>(tl->category_index()->bytes()) / 1e6
            : 0.0);
  }
  std::printf("  throughput: %.0f samples/s, %.1f batches/s\n", sps, r.batches_per_second());
  std::printf(
      "  per core:   %.0f samples/s per thread (%d thread%s), %.0f samples per CPU-second "
      "(all threads, consumer included)\n",
      per_thread, r.threads, r.threads == 1 ? "" : "s", per_cpu_second);
  std::printf("  checksum:   %016llx\n", static_cast<unsigned long long>(r.checksum));
  std::fflush(stdout);

  if (!flags.json.empty()) {
    nlohmann::json j;
    j["benchmark"] = "loader";
    j["command"] = CommandLine();
    j["machine"] = {
        {"cpu_model", machine.cpu_model}, {"cpus", machine.cpus}, {"hostname", machine.hostname}};
    j["build_type"] = SIFT_BUILD_TYPE;
    j["dataset"] = {{"dir", flags.dir}, {"source_type", ds->source_type()}, {"samples", n}};
    j["options"] = {{"split", data::SplitName(opt.split)},
                    {"order", data::SampleOrderName(opt.order)},
                    {"batch_size", opt.batch_size},
                    {"max_history", opt.history.max_history},
                    {"short_history", opt.history.short_history},
                    {"long_negatives", opt.history.long_negatives},
                    {"hard_search_window", opt.history.hard_search_window},
                    {"threads", r.threads},
                    {"prefetch", opt.prefetch},
                    {"seed", opt.seed}};
    if (opt.history.hard_search_window > 0) j["index_seconds"] = index_seconds;
    j["warmup_steps"] = r.warmup_steps;
    j["steps"] = r.steps;
    j["samples"] = r.samples;
    j["epochs"] = r.epochs;
    j["seconds"] = r.seconds;
    j["cpu_seconds"] = r.cpu_seconds;
    j["samples_per_second"] = sps;
    j["samples_per_second_per_thread"] = per_thread;
    j["samples_per_cpu_second"] = per_cpu_second;
    j["batches_per_second"] = r.batches_per_second();
    j["checksum"] = absl::StrFormat("%016x", r.checksum);
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(flags.json, j.dump(2) + "\n"));
    std::printf("  json:       %s\n", flags.json.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void AddBenchLoader(CLI::App* bench, Action* action) {
  auto flags = std::make_shared<BenchLoaderFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "loader", "Samples/s of batch materialisation (the training loader) on a dataset");
  cmd->add_option("dir", flags->dir, "Dataset directory")->required();
  cmd->add_option("--threads", flags->threads, "Materialisation threads (0 = every CPU)")
      ->capture_default_str();
  cmd->add_option("--batch-size", flags->batch_size, "Samples per batch")->capture_default_str();
  cmd->add_option("--steps", flags->steps, "Timed batches")->capture_default_str();
  cmd->add_option("--warmup", flags->warmup, "Batches consumed before timing")
      ->capture_default_str();
  cmd->add_option("--max-history", flags->max_history, "History slots per sample")
      ->capture_default_str();
  cmd->add_option("--short-history", flags->short_history, "Newest slots forming the short part")
      ->capture_default_str();
  cmd->add_flag("--long-negatives", flags->long_negatives,
                "Also draw negatives for the long slots (TFRecord export does)");
  cmd->add_option("--hard-search-window", flags->hard_search_window,
                  "Hard search (SIM gsu hard): the long slots (max-history - short-history = K) "
                  "are the newest K events of the target's category among this many before the "
                  "short part; 0 = the newest events")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--split", flags->split, "train or test")
      ->check(CLI::IsMember({"train", "test"}))
      ->capture_default_str();
  cmd->add_option("--order", flags->order, "shuffled or reference")
      ->check(CLI::IsMember({"shuffled", "reference"}))
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Shuffle seed")->capture_default_str();
  cmd->add_option("--prefetch", flags->prefetch, "Batch buffers (2 = double-buffered)")
      ->capture_default_str();
  cmd->add_option("--reference-prebatch", flags->reference_prebatch,
                  "With --order reference: mirror TFRecords prebatched at P samples per record")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", flags->json, "Also write the results as JSON to this file");
  cmd->callback([flags, action] { *action = [flags] { return RunBenchLoader(*flags); }; });
}

}  // namespace sift::cli
