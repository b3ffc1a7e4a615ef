// `sift report` end to end: real `sift local` jobs (coordinator, embedding server, worker on
// loopback) on a small dataset, the real renderer (Debian's python3 with matplotlib and scipy).
// The report's numbers are checked against the runs' own DLLL logs, the saved predictions against
// the logged exact AUC; a report killed after its first run resumes without redoing it; a
// deterministic configuration repeated gives identical AUCs and the report says so; a failing
// run is reported and does not stop the others; bad matrices fail before any run starts.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/auc.h"
#include "common/dllogger.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/local_test_util.h"
#include "tests/util/test_cluster.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
namespace fs = std::filesystem;

// DIN (the fastest model), 2 epochs of 15 steps: 30 steps, so 10 remain after the 20 warm-up
// steps the performance table leaves out; one embedding server.
std::string BaseJob() {
  return "job:\n"
         "  model: {type: din}\n"
         "  training: {epochs: 2, batch_size: 256, staleness: 0, train_eval_samples: 512, "
         "max_steps_per_epoch: 15}\n"
         "  cluster: {servers: 1}\n";
}

struct RunLog {
  double test_auc = 0;
  double samples_per_s = 0;  // per-step mean, first 20 steps excluded
};

RunLog ReadRunLog(const std::string& path) {
  RunLog r;
  StatusOr<std::vector<DllRecord>> records = ReadDllLogFile(path);
  EXPECT_TRUE(records.ok()) << records.status();
  if (!records.ok()) return r;
  std::vector<double> rates;
  for (const DllRecord& rec : *records) {
    if (rec.type != DllRecord::Type::kLog) continue;
    for (const auto& [k, v] : rec.data) {
      if (rec.step.empty() && k == "test_auc") r.test_auc = v;
      if (rec.step.size() == 2 && k == "samples/s") rates.push_back(v);
    }
  }
  EXPECT_GT(rates.size(), 20u) << path;
  // Samples over time at a constant batch: the harmonic mean of the per-step rates.
  double seconds_per_sample = 0;
  for (size_t i = 20; i < rates.size(); ++i) seconds_per_sample += 1.0 / rates[i];
  r.samples_per_s = static_cast<double>(rates.size() - 20) / seconds_per_sample;
  return r;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double SampleStd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}
// Python's f"{x:,.0f}".
std::string Thousands(double x) {
  std::string digits = absl::StrFormat("%.0f", x);
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    out += digits[static_cast<size_t>(i)];
    if ((n - 1 - i) % 3 == 0 && i != n - 1) out += ',';
  }
  return out;
}
// The two-sample KS statistic: the largest gap between the empirical CDFs.
double KsStatistic(std::vector<double> a, std::vector<double> b) {
  std::vector<double> all = a;
  all.insert(all.end(), b.begin(), b.end());
  double d = 0;
  for (double x : all) {
    const double fa =
        static_cast<double>(std::count_if(a.begin(), a.end(), [&](double v) { return v <= x; })) /
        a.size();
    const double fb =
        static_cast<double>(std::count_if(b.begin(), b.end(), [&](double v) { return v <= x; })) /
        b.size();
    d = std::max(d, std::abs(fa - fb));
  }
  return d;
}

// The runs' result.json files by run directory name.
std::map<std::string, json> Results(const std::string& out) {
  std::map<std::string, json> results;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out + "/runs", ec)) {
    const std::string r = e.path().string() + "/result.json";
    if (fs::exists(r)) results[e.path().filename().string()] = local_test::ReadJson(r);
  }
  return results;
}

bool IsPng(const std::string& path) {
  const std::string head = testing::ReadAll(path).substr(0, 8);
  return head == "\x89PNG\r\n\x1a\n";
}

class ReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    dataset_ = new std::string(local_test::MakeSmallDataset(*dir_));
  }
  static void TearDownTestSuite() {
    delete dataset_;
    delete dir_;
  }
  std::string WriteMatrix(const std::string& name, const std::string& text) {
    const std::string path = dir_->Sub(name);
    testing::WriteAll(path, absl::StrCat("dataset: \"", *dataset_, "\"\n", BaseJob(), text));
    return path;
  }
  static inline testing::TempDir* dir_ = nullptr;
  static inline std::string* dataset_ = nullptr;
};

TEST_F(ReportTest, TwoConfigurationsTimesTwoRunsResumeAfterAKillAndMatchTheirLogs) {
  const std::string matrix = WriteMatrix(
      "precision.yaml",
      "name: precision check\n"
      "matrix:\n  precision: [fp32, bf16]\n"
      "runs: {seeds: [1, 2]}\n"
      "benchmarks:\n  train: {steps: 5}\n  inference: {batch_sizes: [64, 128], steps: 5}\n");
  const std::string out = dir_->Sub("report-precision");

  // Killed (SIGKILL, the whole process group) once its first run is recorded.
  SubprocessOptions o;
  o.argv = {SIFT_BINARY, "report", "--matrix", matrix, "--out", out};
  o.log_path = dir_->Sub("report-first.log");
  StatusOr<Subprocess> first = Subprocess::Start(o);
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Time deadline = absl::Now() + absl::Minutes(5);
  ExitInfo exit;
  bool ended = false;
  while (Results(out).empty() && absl::Now() < deadline) {
    if (first->Poll(&exit)) {
      ended = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_FALSE(ended) << "sift report ended early: " << exit.Describe() << "\n"
                      << testing::ReadAll(o.log_path);
  ::kill(-first->pid(), SIGKILL);
  first->Wait();
  std::map<std::string, json> before = Results(out);
  ASSERT_EQ(before.size(), 1u) << testing::ReadAll(o.log_path);
  const std::string first_name = before.begin()->first;
  const std::string first_result = out + "/runs/" + first_name + "/result.json";
  const std::string first_text = testing::ReadAll(first_result);
  struct stat st_before {};
  ASSERT_EQ(::stat(first_result.c_str(), &st_before), 0);

  // Resumed: the first run is reused, the three others run.
  testing::RunResult r = testing::RunSift({"report", "--matrix", matrix, "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 run(s); 1 done before (reused), 3 to run"));
  EXPECT_THAT(r.out, HasSubstr("[4/4]"));
  EXPECT_THAT(r.out, Not(HasSubstr("[1/4]"))) << "the first run was redone";
  EXPECT_EQ(testing::ReadAll(first_result), first_text);
  struct stat st_after {};
  ASSERT_EQ(::stat(first_result.c_str(), &st_after), 0);
  EXPECT_EQ(st_after.st_mtim.tv_sec, st_before.st_mtim.tv_sec);
  EXPECT_EQ(st_after.st_mtim.tv_nsec, st_before.st_mtim.tv_nsec);

  // Every section and plot.
  const std::string md = testing::ReadAll(out + "/report.md");
  for (const char* section :
       {"# precision check", "## Training accuracy", "## Training stability",
        "## Impact of precision", "## ROC curves", "## Training performance",
        "### Inference performance", "## Failed runs", "## Commands", "sift kernels"}) {
    EXPECT_THAT(md, HasSubstr(section));
  }
  for (const char* plot : {"stability.png", "roc.png", "inference.png"}) {
    EXPECT_TRUE(IsPng(out + "/plots/" + plot)) << plot;
    EXPECT_THAT(md, HasSubstr(absl::StrCat("(plots/", plot, ")")));
  }
  EXPECT_THAT(md, HasSubstr("None: every run completed."));
  // Every configuration's settings as it ran: the cluster's size and the precision by name.
  EXPECT_THAT(md, HasSubstr("## Settings"));
  EXPECT_THAT(md, ::testing::ContainsRegex(R"(\| 1 \| [0-9]+ \| [0-9]+ \| cpu \| fp32 \|)"));
  EXPECT_THAT(md, ::testing::ContainsRegex(R"(\| 2 \| [0-9]+ \| [0-9]+ \| cpu \| bf16 \|)"));
  // The renderer written next to the report is the source's, byte for byte (embedded at build).
  EXPECT_EQ(testing::ReadAll(out + "/render_report.py"),
            testing::ReadAll(std::string(SIFT_SOURCE_DIR) + "/cli/report_render.py"));

  // The tables' numbers are the DLLL logs' numbers.
  std::map<std::string, std::vector<double>> aucs, rates;
  const std::map<std::string, json> results = Results(out);
  ASSERT_EQ(results.size(), 4u);
  for (const auto& [name, res] : results) {
    const std::string precision = res["axes"]["precision"];
    // Each run is one `sift local` job: the coordinator writes its results to results/job-1/.
    const std::string results_dir = out + "/runs/" + name + "/results/job-1";
    const RunLog log = ReadRunLog(results_dir + "/log.json");
    EXPECT_EQ(res["test_auc"].get<double>(), log.test_auc) << name;
    aucs[precision].push_back(log.test_auc);
    rates[precision].push_back(log.samples_per_s);
    // The saved predictions give the logged exact AUC, bit for bit.
    StatusOr<Predictions> p = ReadPredictionsCsv(results_dir + "/test_predictions.csv");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GT(p->scores.size(), 100u);
    EXPECT_EQ(ExactAuc(p->scores, p->labels), log.test_auc) << name;
  }
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::vector<double>& a = aucs[precision];
    ASSERT_EQ(a.size(), 2u);
    EXPECT_THAT(
        md, HasSubstr(absl::StrFormat("| %s | 2/2 | %.4f ± %.4f | %.4f | %.4f |", precision,
                                      Mean(a), SampleStd(a), *std::min_element(a.begin(), a.end()),
                                      *std::max_element(a.begin(), a.end()))))
        << md;
    EXPECT_THAT(
        md, HasSubstr(absl::StrCat("| ", precision, " | 2 | ", Thousands(Mean(rates[precision])),
                                   " ± ", Thousands(SampleStd(rates[precision])), " |")))
        << md;
  }
  EXPECT_THAT(md, HasSubstr(absl::StrFormat("| bf16 | %.4f ± %.4f | %.4f ± %.4f | %.4f |",
                                            Mean(aucs["fp32"]), SampleStd(aucs["fp32"]),
                                            Mean(aucs["bf16"]), SampleStd(aucs["bf16"]),
                                            KsStatistic(aucs["fp32"], aucs["bf16"]))))
      << md;
  // Benchmarks: training at the job's batch and staleness, inference per batch size.
  EXPECT_THAT(md, HasSubstr("### Training benchmark"));
  EXPECT_THAT(md, HasSubstr("| din | cpu | fp32 | 256 | 0 |"));
  EXPECT_THAT(md, HasSubstr("| din | cpu | bf16 | 256 | 0 |"));
  EXPECT_THAT(md, HasSubstr("| din | cpu | fp32 | 64 |"));
  EXPECT_THAT(md, HasSubstr("| din | cpu | bf16 | 128 |"));

  // Asked again: nothing runs, the same report.
  testing::RunResult again = testing::RunSift({"report", "--matrix", matrix, "--out", out});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("4 done before (reused), 0 to run"));
  EXPECT_THAT(again.out, HasSubstr("(0 run(s) here, 4 reused, 0 failed)"));
  // Redrawn from what is there; a dry run lists the runs as done.
  testing::RunResult render =
      testing::RunSift({"report", "--matrix", matrix, "--out", out, "--render-only"});
  ASSERT_EQ(render.exit_code, 0) << render.out << render.err;
  auto accuracy = [](const std::string& text) {
    const size_t from = text.find("## Training accuracy");
    return text.substr(from, text.find("## Training stability") - from);
  };
  EXPECT_EQ(accuracy(testing::ReadAll(out + "/report.md")), accuracy(md));
  testing::RunResult dry =
      testing::RunSift({"report", "--matrix", matrix, "--out", out, "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  EXPECT_THAT(dry.out, HasSubstr(absl::StrCat("done  ", first_name)));
}

TEST_F(ReportTest, OneSeedRepeatedDeterministicallyGivesIdenticalAucsAndTheReportSaysSo) {
  const std::string matrix = WriteMatrix("repeat.yaml",
                                         "matrix:\n  deterministic: [true]\n"
                                         "runs: {seed: 3, repeat: 3}\n");
  const std::string out = dir_->Sub("report-repeat");
  testing::RunResult r = testing::RunSift({"report", "--matrix", matrix, "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::map<std::string, json> results = Results(out);
  ASSERT_EQ(results.size(), 3u);
  std::vector<double> aucs;
  for (const auto& [name, res] : results) {
    EXPECT_EQ(res["seed"].get<int>(), 3);
    aucs.push_back(res["test_auc"].get<double>());
  }
  EXPECT_EQ(aucs[0], aucs[1]);
  EXPECT_EQ(aucs[0], aucs[2]);
  const std::string md = testing::ReadAll(out + "/report.md");
  EXPECT_THAT(md, HasSubstr(absl::StrFormat(
                      "all 3 runs give the identical test AUC %.17g (bit for bit): deterministic, "
                      "one seed repeated.",
                      aucs[0])))
      << md;
  EXPECT_THAT(md, HasSubstr("No pair of configurations that differ only in precision"));
}

TEST_F(ReportTest, AFailingRunIsReportedAndTheOthersStillRun) {
  // A copy of the dataset whose events file is cut short: it passes the checks before the runs
  // (a dataset directory with its feature spec) and fails in its run.
  const std::string broken = dir_->Sub("broken-data");
  fs::copy(*dataset_, broken, fs::copy_options::recursive);
  int truncated = 0;
  for (const auto& e : fs::directory_iterator(broken)) {
    if (e.path().filename() == "events.bin") {
      fs::resize_file(e.path(), fs::file_size(e.path()) / 3);
      ++truncated;
    }
  }
  ASSERT_GT(truncated, 0);
  const std::string path = dir_->Sub("failing.yaml");
  testing::WriteAll(path, absl::StrCat(BaseJob(), "matrix:\n  dataset: [\"", *dataset_, "\", \"",
                                       broken, "\"]\n"));
  const std::string out = dir_->Sub("report-failing");
  testing::RunResult r = testing::RunSift({"report", "--matrix", path, "--out", out});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("[2/2]"));
  EXPECT_THAT(r.out, HasSubstr("FAILED"));
  EXPECT_THAT(r.err, HasSubstr("1 run(s) or benchmark(s) failed"));
  const std::map<std::string, json> results = Results(out);
  ASSERT_EQ(results.size(), 2u);
  int completed = 0;
  std::string failed_log;
  for (const auto& [name, res] : results) {
    if (res["state"] == "completed") {
      ++completed;
    } else {
      failed_log = res["log"];
    }
  }
  EXPECT_EQ(completed, 1);
  const std::string md = testing::ReadAll(out + "/report.md");
  EXPECT_THAT(md, HasSubstr("## Failed runs"));
  EXPECT_THAT(md, HasSubstr(failed_log));
  EXPECT_THAT(md, Not(HasSubstr("None: every run completed.")));
}

TEST_F(ReportTest, RunsAreJobsOnACoordinatorWithItsSharedResultsDirectory) {
  testing::TestClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  testing::TestCluster cluster(*dir_, "report-cluster", co);
  const std::string matrix = WriteMatrix("cluster.yaml",
                                         "matrix:\n  workers: [1]\n"
                                         "runs: {seeds: [1, 2]}\n");
  const std::string out = dir_->Sub("report-cluster");
  // Killed once its first job is submitted: the job runs on; the resumed report follows it
  // instead of submitting it again into the same results directory.
  SubprocessOptions o;
  o.argv = {SIFT_BINARY, "report", "--matrix",      matrix,
            "--out",     out,      "--coordinator", cluster.coordinator_address()};
  o.log_path = dir_->Sub("report-cluster-first.log");
  StatusOr<Subprocess> first = Subprocess::Start(o);
  ASSERT_TRUE(first.ok()) << first.status();
  std::string job_id_file;
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (job_id_file.empty() && absl::Now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out + "/runs", ec)) {
      if (fs::exists(e.path() / "job_id")) job_id_file = (e.path() / "job_id").string();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(job_id_file.empty()) << testing::ReadAll(o.log_path);
  ::kill(-first->pid(), SIGKILL);
  first->Wait();
  std::string first_job = testing::ReadAll(job_id_file);
  first_job = first_job.substr(0, first_job.find('\n'));
  testing::RunResult r = testing::RunSift(
      {"report", "--matrix", matrix, "--out", out, "--coordinator", cluster.coordinator_address()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << cluster.AllErrors();
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("following job ", first_job)));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("on the coordinator ", cluster.coordinator_address())));
  const std::map<std::string, json> results = Results(out);
  ASSERT_EQ(results.size(), 2u);
  int followed = 0;
  for (const auto& [name, res] : results) {
    EXPECT_EQ(res["state"], "completed") << name;
    EXPECT_FALSE(res["job_id"].get<std::string>().empty());
    if (res["job_id"] == first_job) ++followed;
    // The coordinator wrote the run's log and predictions into the report's directory.
    const std::string results_dir =
        out + "/runs/" + name + "/results/" + res["job_id"].get<std::string>();
    EXPECT_EQ(ReadRunLog(results_dir + "/log.json").test_auc, res["test_auc"].get<double>());
    EXPECT_TRUE(fs::exists(results_dir + "/test_predictions.csv"));
  }
  EXPECT_EQ(followed, 1);
  const std::string md = testing::ReadAll(out + "/report.md");
  EXPECT_THAT(md, HasSubstr("(coordinator)"));
  EXPECT_THAT(md, HasSubstr(absl::StrCat("--coordinator ", cluster.coordinator_address())));
  // A second report on the same cluster reuses both runs (the key includes the launcher).
  testing::RunResult again = testing::RunSift(
      {"report", "--matrix", matrix, "--out", out, "--coordinator", cluster.coordinator_address()});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("2 done before (reused), 0 to run"));
}

TEST_F(ReportTest, BadMatricesFailBeforeAnyRunStarts) {
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"matrix:\n  model: [din]\n  colour: [red]\n", "matrix.colour: unknown axis"},
      {"matrix: {}\n", "matrix: empty"},
      {"matrix:\n  backend: [cpu, cuda]\n", "configuration 2 (backend=cuda): backend cuda, but"},
      {"matrix:\n  dataset: [/nonexistent/data]\n", "is not a sift dataset"},
  };
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // no device, also on a machine with a GPU
  int i = 0;
  for (const Case& c : cases) {
    const std::string matrix = WriteMatrix(absl::StrCat("bad", i, ".yaml"), c.text);
    const std::string out = dir_->Sub(absl::StrCat("report-bad", i++));
    testing::RunResult r = testing::RunSift({"report", "--matrix", matrix, "--out", out});
    EXPECT_EQ(r.exit_code, 2) << c.text << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.text;
    EXPECT_TRUE(Results(out).empty()) << c.text;
    EXPECT_FALSE(fs::exists(out + "/report.md")) << c.text;
  }
}

}  // namespace
}  // namespace sift
