// sift data inspect DIR [--verify] [--json]: what a dataset holds and the bounds to read a
// training run against.
#include <cstdio>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "common/data/dataset.h"
#include "common/data/heuristics.h"
#include "common/data/inspect.h"
#include "common/thread_pool.h"

namespace sift::cli {
namespace {

struct InspectOptions {
  std::string dir;
  std::string user;  // print this user's timeline (by token) instead of the summary
  int64_t limit = 0;
  bool verify = false;
  bool json = false;
  int threads = 0;
};

// A date like 2024-03-01 12:00:00 UTC, or the raw number for an implausible one.
std::string FormatTime(int64_t seconds) {
  if (seconds < -62135596800LL || seconds > 253402300799LL) return absl::StrCat(seconds);
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixSeconds(seconds), absl::UTCTimeZone());
}

// The user's events, oldest first, with tokens (when the dataset has them) and times, marked by
// the split they serve in.
Status PrintUser(const data::Dataset& ds, const InspectOptions& o) {
  const data::Timeline* t = ds.timeline();
  const data::Vocab* v = ds.vocab();
  if (t == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(o.dir, ": --user needs a timeline dataset; this one stores samples (",
                     ds.source_type(), ")"));
  }
  int64_t row = -1;
  if (v != nullptr) {
    const int64_t id = v->Lookup(0, o.user);
    if (id == 0) {
      return absl::NotFoundError(absl::StrCat(o.dir, ": no user '", o.user,
                                              "' (users dropped by the import's filters are not "
                                              "in the dataset)"));
    }
    row = id - 1;  // imports give user u the id u + 1
  } else {
    int64_t id = 0;
    if (!absl::SimpleAtoi(o.user, &id) || id < 1 || id > t->num_users()) {
      return absl::NotFoundError(absl::StrCat(
          o.dir,
          ": this dataset keeps no tokens (generated or converted), so --user takes the "
          "user's id, 1..",
          t->num_users()));
    }
    row = id - 1;
  }
  const int64_t L = t->user_length(row), K = ds.test_events();
  const bool impressions = ds.impressions(data::Split::kTrain) != nullptr;
  std::printf("user %s (id %lld): %lld events%s\n", o.user.c_str(),
              static_cast<long long>(t->user_features(row)[0]), static_cast<long long>(L),
              impressions ? "" : absl::StrCat("; the last ", K, " are test targets").c_str());
  auto token = [v](int table, int32_t id) {
    return v != nullptr ? std::string(v->token(table, id)) : absl::StrCat(id);
  };
  const int64_t first = o.limit > 0 ? std::max<int64_t>(0, L - o.limit) : 0;
  if (first > 0)
    std::printf("  ... %lld older events (--limit 0 shows all)\n", static_cast<long long>(first));
  std::printf("  %6s  %-5s  %-20s  %-20s  %s\n", "#", "split", "item", "category", "time (UTC)");
  for (int64_t k = first; k < L; ++k) {
    const int32_t* ev = t->event(t->user_begin(row) + k);
    const char* split = impressions ? "" : k >= L - K ? "test" : k >= 1 ? "train" : "";
    std::string when =
        t->has_timestamps() ? FormatTime(t->timestamps()[t->user_begin(row) + k]) : "";
    std::printf("  %6lld  %-5s  %-20s  %-20s  %s\n", static_cast<long long>(k + 1), split,
                token(1, ev[0]).c_str(),
                ds.spec().num_item_features() > 1 ? token(2, ev[1]).c_str() : "", when.c_str());
  }
  if (impressions) {
    for (data::Split split : {data::Split::kTrain, data::Split::kTest}) {
      const data::ImpressionsFile* f = ds.impressions(split);
      int64_t n = 0;
      for (int64_t i = 0; i < f->size(); ++i) n += f->user(i) == row;
      std::printf("%s samples: %lld\n", data::SplitName(split), static_cast<long long>(n));
      for (int64_t i = 0; i < f->size(); ++i) {
        if (f->user(i) != row) continue;
        std::printf("  label %d  item %-20s  category %-20s  %s  history: the first %lld events\n",
                    f->label(i), token(1, f->target(i)[0]).c_str(),
                    token(2, f->target(i)[1]).c_str(), FormatTime(f->time(i)).c_str(),
                    static_cast<long long>(f->cutoff(i)));
      }
    }
  }
  return absl::OkStatus();
}

Status RunInspect(const InspectOptions& o) {
  SIFT_ASSIGN_OR_RETURN(auto ds, data::Dataset::Open(o.dir, o.verify));
  if (!o.user.empty()) return PrintUser(*ds, o);
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
    // Over every earlier event, not 100 slots: the bar for a model that searches the whole
    // history (SIM hard search, lifelong windows). Timelines with a category only.
    if (ds->timeline() != nullptr && ds->spec().num_item_features() >= 2) {
      SIFT_ASSIGN_OR_RETURN(data::FullHistoryAucs f, data::ComputeFullHistoryAucs(*ds, &pool));
      summary.heuristic_test_auc[data::kFracFullHistory] = f.frac_full_history;
      summary.heuristic_test_auc[data::kMixFullHistory] = f.mix_full_history;
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
  cmd->add_option("--user", o->user,
                  "Print this user's timeline instead (a token, or an id when the dataset keeps "
                  "no tokens): items, categories, times, and the split of each event");
  cmd->add_option("--limit", o->limit, "With --user: only the newest N events (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o, action] { *action = [o] { return RunInspect(*o); }; });
}

}  // namespace sift::cli
