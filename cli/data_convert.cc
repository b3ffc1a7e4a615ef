// sift data convert: a sift dataset to the reference's TFRecord layout (--to tfrecord) and back
// (--from tfrecord). Parses flags, calls common/data/tfrecord_convert.h, prints what was written.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "common/data/dataset.h"
#include "common/data/tfrecord_convert.h"
#include "common/file_util.h"
#include "common/thread_pool.h"

namespace sift::cli {
namespace {

struct ConvertFlags {
  std::string src, out, to, from;
  int64_t prebatch = 0;
  int train_parts = 8;
  int test_parts = 4;
  int threads = 0;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void PrintFiles(const char* verb, const data::TfrecordConvertStats& stats) {
  for (const auto& f : stats.files) {
    std::printf("  %s %s: %lld records, %lld samples, %.1f MB\n", verb, f.path.c_str(),
                static_cast<long long>(f.records), static_cast<long long>(f.samples),
                static_cast<double>(f.bytes) / 1e6);
  }
}

Status RunExport(const ConvertFlags& flags, int threads) {
  const auto start = std::chrono::steady_clock::now();
  SIFT_ASSIGN_OR_RETURN(auto dataset, data::Dataset::Open(flags.src));
  data::TfrecordExportOptions options;
  options.prebatch = flags.prebatch;
  options.train_parts = flags.train_parts;
  options.test_parts = flags.test_parts;
  options.threads = threads;
  SIFT_ASSIGN_OR_RETURN(data::TfrecordConvertStats stats,
                        data::ExportTfrecord(*dataset, flags.out, options));
  std::printf("exported %s -> %s (TFRecord, prebatch %lld)\n", flags.src.c_str(), flags.out.c_str(),
              static_cast<long long>(flags.prebatch));
  PrintFiles("wrote", stats);
  std::printf("  wrote %s\n", JoinPath(flags.out, data::kFeatureSpecFile).c_str());
  std::printf("%lld train + %lld test samples, %lld records in %zu files, %.2f s, %d threads\n",
              static_cast<long long>(stats.train_samples),
              static_cast<long long>(stats.test_samples), static_cast<long long>(stats.records),
              stats.files.size(), SecondsSince(start), threads);
  return absl::OkStatus();
}

Status RunImport(const ConvertFlags& flags, int threads) {
  const auto start = std::chrono::steady_clock::now();
  data::TfrecordImportOptions options;
  options.threads = threads;
  SIFT_ASSIGN_OR_RETURN(data::TfrecordConvertStats stats,
                        data::ImportTfrecord(flags.src, flags.out, options));
  std::printf("imported %s -> %s (explicit samples)\n", flags.src.c_str(), flags.out.c_str());
  PrintFiles("read", stats);
  for (const char* f : {data::kTrainSamplesFile, data::kTestSamplesFile, data::kFeatureSpecFile}) {
    std::printf("  wrote %s\n", JoinPath(flags.out, f).c_str());
  }
  std::printf("%lld train + %lld test samples from %lld records in %zu files, %.2f s, %d threads\n",
              static_cast<long long>(stats.train_samples),
              static_cast<long long>(stats.test_samples), static_cast<long long>(stats.records),
              stats.files.size(), SecondsSince(start), threads);
  return absl::OkStatus();
}

Status RunConvert(const ConvertFlags& flags) {
  if (flags.to.empty() == flags.from.empty()) {
    return absl::InvalidArgumentError(
        "data convert: give exactly one of --to tfrecord or "
        "--from tfrecord");
  }
  const int threads = flags.threads > 0 ? flags.threads : AvailableCpus();
  return flags.to.empty() ? RunImport(flags, threads) : RunExport(flags, threads);
}

}  // namespace

void AddDataConvert(CLI::App* data, Action* action) {
  auto flags = std::make_shared<ConvertFlags>();
  CLI::App* cmd = data->add_subcommand(
      "convert", "Convert a sift dataset to the reference's TFRecord layout, or import one");
  cmd->add_option("SRC", flags->src,
                  "Source directory (a sift dataset, or a TFRecord directory "
                  "with --from tfrecord)")
      ->required();
  CLI::Option* to = cmd->add_option("--to", flags->to, "Export SRC to this format")
                        ->check(CLI::IsMember({"tfrecord"}));
  CLI::Option* from = cmd->add_option("--from", flags->from, "Import SRC from this format")
                          ->check(CLI::IsMember({"tfrecord"}));
  to->excludes(from);
  cmd->add_option("--out", flags->out, "Output directory")->required();
  cmd->add_option("--prebatch", flags->prebatch,
                  "Samples per Example (0: one sample per Example); export only")
      ->check(CLI::NonNegativeNumber)
      ->excludes(from);
  cmd->add_option("--train-parts", flags->train_parts, "TFRecord part files of the train split")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->excludes(from);
  cmd->add_option("--test-parts", flags->test_parts, "TFRecord part files of the test split")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->excludes(from);
  cmd->add_option("--threads", flags->threads, "Worker threads (0: every available CPU)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([flags, action] {
    // A usage error (exit 2), reported by CLI11 like any other missing option.
    if (flags->to.empty() && flags->from.empty()) {
      throw CLI::RequiredError("one of --to tfrecord or --from tfrecord");
    }
    *action = [flags] { return RunConvert(*flags); };
  });
}

}  // namespace sift::cli
