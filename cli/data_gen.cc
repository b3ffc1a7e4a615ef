// sift data gen: writes a synthetic benchmark dataset (docs/data.md sections 3 and 5) with its
// oracle and heuristic test AUCs in the metadata, and prints a short summary.
#include <chrono>
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "common/data/synthetic.h"
#include "common/file_util.h"
#include "common/thread_pool.h"

namespace sift::cli {
namespace {

struct GenFlags {
  std::string preset;
  uint64_t seed = 1;
  std::string out;
  std::optional<int64_t> users, items, categories, max_events;
  bool long_tail = false;
  int threads = 0;
};

// Flags -> options, in the documented order: preset, size overrides, --long-tail, --max-events.
StatusOr<data::SyntheticOptions> ToOptions(const GenFlags& f) {
  SIFT_ASSIGN_OR_RETURN(data::SyntheticOptions o, data::PresetOptions(f.preset));
  o.seed = f.seed;
  if (f.users) o.users = *f.users;
  if (f.items) o.items = *f.items;
  if (f.categories) o.categories = *f.categories;
  if (f.long_tail) data::ApplyLongTail(&o);
  if (f.max_events) o.params.len_cap = *f.max_events;
  SIFT_RETURN_IF_ERROR(data::ValidateSyntheticOptions(o));
  return o;
}

Status RunDataGen(const GenFlags& f) {
  SIFT_ASSIGN_OR_RETURN(const data::SyntheticOptions options, ToOptions(f));
  const std::string out = f.out.empty() ? JoinPath("data", f.preset) : f.out;
  const auto start = std::chrono::steady_clock::now();
  ThreadPool pool(f.threads > 0 ? f.threads : AvailableCpus());
  SIFT_ASSIGN_OR_RETURN(const data::SyntheticSummary s,
                        data::WriteSyntheticDataset(options, out, &pool));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s (preset %s, seed %llu%s)\n", out.c_str(), options.preset.c_str(),
              static_cast<unsigned long long>(options.seed),
              options.long_tail ? ", long tail" : "");
  std::printf("users %lld, items %lld, categories %lld, events %lld\n",
              static_cast<long long>(s.users), static_cast<long long>(options.items),
              static_cast<long long>(options.categories), static_cast<long long>(s.events));
  std::printf("events per user: mean %.1f, median %lld, min %lld, max %lld\n", s.mean_length,
              static_cast<long long>(s.median_length), static_cast<long long>(s.min_length),
              static_cast<long long>(s.max_length));
  std::printf("samples: train %lld, test %lld\n", static_cast<long long>(s.train_samples),
              static_cast<long long>(s.test_samples));
  std::printf("test AUC: oracle %.4f, oracle_strong %.4f\n", s.oracle_test_auc,
              s.oracle_strong_test_auc);
  std::printf("heuristic test AUC:");
  for (int h = 0; h < data::kNumHeuristics; ++h) {
    std::printf("%s %s %.4f", h == 0 ? "" : ",",
                data::HeuristicName(static_cast<data::Heuristic>(h)), s.heuristics.auc[h]);
  }
  std::printf("\nfull-history heuristic test AUC: %s %.4f, %s %.4f\n", data::kFracFullHistory,
              s.full_history.frac_full_history, data::kMixFullHistory,
              s.full_history.mix_full_history);
  std::printf("took %.1f s on %d threads\n", seconds, pool.num_threads());
  return absl::OkStatus();
}

}  // namespace

void AddDataGen(CLI::App* data, Action* action) {
  auto flags = std::make_shared<GenFlags>();
  CLI::App* cmd = data->add_subcommand(
      "gen", "Generate the synthetic benchmark (known ground truth, oracle AUC in the metadata)");
  cmd->add_option("--preset", flags->preset, "Size preset")
      ->required()
      ->check(CLI::IsMember({"tiny", "small", "books", "lifelong"}));
  cmd->add_option("--seed", flags->seed, "Generator seed (also the negative-sampling seed)")
      ->capture_default_str();
  cmd->add_option("--out", flags->out, "Output directory (default ./data/<preset>)");
  cmd->add_option("--users", flags->users, "Override the preset's number of users");
  cmd->add_option("--items", flags->items, "Override the preset's number of items");
  cmd->add_option("--categories", flags->categories, "Override the preset's number of categories");
  cmd->add_option("--max-events", flags->max_events,
                  "Cap on events per user (len_cap; default 1000, 20000 with --long-tail)");
  cmd->add_flag("--long-tail", flags->long_tail,
                "Lifelong sequences: len_cap 20000 and a heavier length tail (len_alpha 1.2)");
  cmd->add_option("--threads", flags->threads, "Worker threads (default: available CPUs)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([flags, action] { *action = [flags]() -> Status { return RunDataGen(*flags); }; });
}

}  // namespace sift::cli
