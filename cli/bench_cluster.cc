// sift bench cluster: the distributed overhead of docs/benchmarks.md — 1 worker with 1 embedding
// server over loopback (a real local cluster) vs the same training with in-process tables, in one
// run (cli/cluster_bench.h). Parses flags, prints the machine, build and command, runs the
// benchmark, prints text or JSON (--output json: stdout is the JSON, progress goes to stderr).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/cluster_bench.h"
#include "cli/commands.h"
#include "common/file_util.h"
#include "common/sysinfo.h"

namespace sift::cli {
namespace {

struct BenchClusterFlags {
  ClusterBenchOptions options;
  std::string output = "text";
  std::string json;
};

std::string SelfBinary() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : p.string();
}

Status RunBenchCluster(BenchClusterFlags f) {
  const bool json_out = f.output == "json";
  FILE* text = json_out ? stderr : stdout;
  const MachineInfo machine = GetMachineInfo();
  std::fprintf(text, "sift bench cluster\n  command:    %s\n", CommandLine().c_str());
  std::fprintf(text, "  machine:    %s, %d CPUs, host %s\n", machine.cpu_model.c_str(),
               machine.cpus, machine.hostname.c_str());
  std::fprintf(text, "  build:      %s\n", SIFT_BUILD_TYPE);
  std::fflush(text);
  f.options.binary = SelfBinary();
  f.options.progress = [text](const std::string& line) {
    std::fprintf(text, "  %s\n", line.c_str());
    std::fflush(text);
  };
  SIFT_ASSIGN_OR_RETURN(ClusterBenchResult r, RunClusterBenchmark(f.options));
  nlohmann::json j = ClusterBenchToJson(f.options, r);
  j["command"] = CommandLine();
  j["machine"] = {
      {"cpu_model", machine.cpu_model}, {"cpus", machine.cpus}, {"hostname", machine.hostname}};
  j["build_type"] = SIFT_BUILD_TYPE;
  if (json_out) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", FormatClusterBench(f.options, r).c_str());
  }
  if (!f.json.empty()) {
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(f.json, j.dump(2) + "\n"));
    std::fprintf(text, "  json:       %s\n", f.json.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void AddBenchCluster(CLI::App* bench, Action* action) {
  auto f = std::make_shared<BenchClusterFlags>();
  ClusterBenchOptions& o = f->options;
  CLI::App* cmd = bench->add_subcommand(
      "cluster",
      "Distributed overhead: workers + embedding servers over loopback (1 + 1 by default) vs "
      "in-process tables");
  cmd->add_option("--dataset", o.dataset, "Dataset directory (sift data gen / convert)")
      ->required();
  cmd->add_option("--model", o.model, "Model: sim, dien or din")
      ->check(CLI::IsMember({"sim", "dien", "din"}))
      ->capture_default_str();
  cmd->add_option("--batch-size", o.batch_size, "Samples per training step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "Measured steps after the warm-up, per run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "Threads of the worker and of the in-process run (0 = every CPU)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--tls", o.tls,
                "Run the cluster with security on (mutual TLS, member certificates of a CA made "
                "for this run, an admin token): its cost is the change of the cluster/in-process "
                "ratio against a run without --tls");
  cmd->add_flag("--compare-tls", o.compare_tls,
                "Also run a secured cluster in every round next to the plaintext one and report "
                "their samples/s ratio (this run's cost of TLS)");
  cmd->add_option("--servers", o.servers, "Embedding servers (shards) of the cluster")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--workers", o.workers,
                  "Workers of the cluster (--batch-size is the global batch: a multiple of it)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--compare-sparse-update", o.compare_sparse_update,
                "Also run the job with training.sparse_update: per_rank next to the default step "
                "in every round: samples/s ratio and Push bytes per step (needs --workers >= 2)");
  cmd->add_option("--server-threads", o.server_threads, "Threads of the embedding server")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--repeats", o.repeats,
                  "Rounds; each runs both ways (odd rounds the cluster first)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option(
         "--staleness", o.staleness,
         "Pipeline staleness k, one or more (1,0): 0 synchronous, >= 1 prefetch overlapped")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the init and the shuffling")->capture_default_str();
  cmd->add_option("--output", f->output, "Output on stdout: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--json", f->json, "Also write the results as JSON to this file");
  cmd->callback([f, action] { *action = [f] { return RunBenchCluster(*f); }; });
}

}  // namespace sift::cli
