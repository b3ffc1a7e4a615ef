// sift data inspect DIR [--verify] [--json]: what a dataset holds and the bounds to read a
// training run against.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "common/data/dataset.h"
#include "common/data/heuristics.h"
#include "common/data/inspect.h"
#include "common/thread_pool.h"

namespace sift::cli {
namespace {

struct InspectOptions {
  std::string dir;
  bool verify = false;
  bool json = false;
  int threads = 0;
};

Status RunInspect(const InspectOptions& o) {
  SIFT_ASSIGN_OR_RETURN(auto ds, data::Dataset::Open(o.dir, o.verify));
  SIFT_ASSIGN_OR_RETURN(data::DatasetSummary summary, data::Summarize(*ds));
  summary.verified = o.verify;
  // Datasets without stored bounds (Amazon, imports) get the heuristics computed on the spot:
  // they cost one pass over the test split.
  if (summary.heuristic_test_auc.empty() && summary.test_samples > 0) {
    ThreadPool pool(o.threads);
    SIFT_ASSIGN_OR_RETURN(data::HeuristicAucs h, data::ComputeHeuristicAucs(*ds, &pool));
    for (int i = 0; i < data::kNumHeuristics; ++i) {
      summary.heuristic_test_auc[data::HeuristicName(static_cast<data::Heuristic>(i))] = h.auc[i];
    }
    summary.heuristics_computed = true;
  }
  if (o.json) {
    std::printf("%s\n", data::SummaryToJson(summary).dump(2).c_str());
  } else {
    std::printf("%s", data::SummaryToText(summary).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void AddDataInspect(CLI::App* data, Action* action) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = data->add_subcommand("inspect",
                                       "Summarise a dataset: sizes, cardinalities, "
                                       "history lengths, oracle and heuristic AUCs");
  cmd->add_option("DIR", o->dir, "Dataset directory")->required();
  cmd->add_flag("--verify", o->verify, "Check every file's full checksum (reads all bytes)");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->add_option("--threads", o->threads, "Threads for computed heuristics (0: all CPUs)");
  cmd->callback([o, action] { *action = [o] { return RunInspect(*o); }; });
}

}  // namespace sift::cli
