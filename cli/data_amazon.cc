// sift data amazon: the reference preprocessing of the Amazon reviews (docs/data.md section 4,
// model-spec 7.1–7.5) into a timeline dataset. Prints the bad lines found (stderr) and a summary.
#include <cstdio>
#include <limits>

#include "cli/bad_lines.h"
#include "cli/commands.h"
#include "common/data/amazon.h"

namespace sift::cli {
namespace {

Status RunDataAmazon(data::AmazonOptions options) {
  options.progress = [](absl::string_view phase, int64_t lines) {
    std::fprintf(stderr, "%.*s: %lld lines\n", static_cast<int>(phase.size()), phase.data(),
                 static_cast<long long>(lines));
  };
  SIFT_ASSIGN_OR_RETURN(const data::AmazonReport r, data::ImportAmazon(options));
  PrintBadLines(r.reviews);
  PrintBadLines(r.meta);
  std::printf("wrote %s\n", options.out_dir.c_str());
  std::printf("reviews: %lld lines, %lld valid rows from %lld users, %lld bad, %lld empty\n",
              static_cast<long long>(r.reviews.lines), static_cast<long long>(r.reviews_read),
              static_cast<long long>(r.users_read), static_cast<long long>(r.reviews.bad_lines),
              static_cast<long long>(r.reviews.empty_lines));
  std::printf("meta: %lld lines, %lld bad, %lld empty\n", static_cast<long long>(r.meta.lines),
              static_cast<long long>(r.meta.bad_lines), static_cast<long long>(r.meta.empty_lines));
  std::printf("kept: users %lld (>= %lld reviews), items %lld, categories %lld, reviews %lld\n",
              static_cast<long long>(r.users), static_cast<long long>(options.min_reviews),
              static_cast<long long>(r.items), static_cast<long long>(r.categories),
              static_cast<long long>(r.reviews_kept));
  std::printf("items without metadata %lld, without a category path %lld (both '%s')\n",
              static_cast<long long>(r.items_without_meta),
              static_cast<long long>(r.items_without_category), data::kNoCategory);
  std::printf("samples: train %lld, test %lld\n",
              static_cast<long long>(2 * (r.reviews_kept - 2 * r.users)),
              static_cast<long long>(2 * r.users));
  const double lines = static_cast<double>(2 * r.reviews.lines + r.meta.lines);
  std::printf("took %.1f s (%.0f lines/s over both reviews passes and the metadata)\n", r.seconds,
              r.seconds > 0 ? lines / r.seconds : 0.0);
  return absl::OkStatus();
}

}  // namespace

void AddDataAmazon(CLI::App* data, Action* action) {
  auto options = std::make_shared<data::AmazonOptions>();
  CLI::App* cmd = data->add_subcommand(
      "amazon", "Import Amazon reviews + metadata (gzip or plain) as a timeline dataset");
  cmd->add_option("--reviews", options->reviews_path,
                  "Reviews, JSON lines (reviewerID, asin, unixReviewTime)")
      ->required();
  cmd->add_option("--meta", options->meta_path,
                  "Metadata, one Python-literal dict per line (asin, categories)")
      ->required();
  cmd->add_option("--out", options->out_dir, "Output dataset directory")->required();
  cmd->add_option("--min-reviews", options->min_reviews,
                  "Keep users with at least this many review rows (duplicates count)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--max-bad-fraction", options->max_bad_fraction,
                  "Fail when more than this fraction of a file's non-empty lines is bad")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", options->negative_seed, "Negative-sampling seed of the dataset")
      ->capture_default_str();
  cmd->add_option("--threads", options->threads,
                  "Parser threads (0 = all CPUs); the output does not depend on it")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([options, action] { *action = [options] { return RunDataAmazon(*options); }; });
}

}  // namespace sift::cli
