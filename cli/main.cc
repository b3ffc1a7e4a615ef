// sift: one binary for every role. Parses the command line, runs the selected subcommand, maps
// its Status to an exit code: 0 success, 1 failure (message on stderr), 2 usage error; a command
// may attach another code to its Status (cli/exit_code.h).
#include <cstdio>
#include <iostream>

#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#ifndef SIFT_MINIMAL
#include "common/grpc_security.h"
#endif

namespace sift::cli {
namespace {
std::string g_command_line;
}  // namespace

const std::string& CommandLine() { return g_command_line; }

}  // namespace sift::cli

int main(int argc, char** argv) {
  using namespace sift::cli;
  g_command_line = absl::StrJoin(argv, argv + argc, " ");
#ifndef SIFT_MINIMAL
  sift::InstallGrpcLogTranslation();  // a TLS/plaintext mismatch named as such
#endif

  CLI::App app{
      "sift: train search-based interest models (SIM, DIEN, DIN) on long behaviour "
      "sequences"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sift ") + SIFT_VERSION);
  Action action;

#ifndef SIFT_MINIMAL
  CLI::App* data = app.add_subcommand("data", "Datasets: generate, import, convert, inspect");
#else
  CLI::App* data = app.add_subcommand("data", "Datasets: generate, import, inspect");
#endif
  data->require_subcommand(1);
  AddDataGen(data, &action);
  AddDataAmazon(data, &action);
  AddDataEvents(data, &action);
#ifndef SIFT_MINIMAL  // SIFT_MINIMAL builds only the local subcommands (cli/CMakeLists.txt)
  AddDataConvert(data, &action);
#endif
  AddDataInspect(data, &action);

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  AddBenchLoader(bench, &action);
  AddBenchKernels(bench, &action);
  AddBenchTrain(bench, &action);
  AddBenchInference(bench, &action);
#ifndef SIFT_MINIMAL
  AddBenchPs(bench, &action);
  AddBenchCluster(bench, &action);
#endif

  AddDevice(&app, &action);
  AddTrain(&app, &action);
#ifndef SIFT_MINIMAL
  AddEmbeddingServer(&app, &action);
  AddHealth(&app, &action);
  AddSubmit(&app, &action);
  AddStatus(&app, &action);
  AddJobs(&app, &action);
  AddCancel(&app, &action);
  AddLogs(&app, &action);
  AddLocal(&app, &action);
  AddWorker(&app, &action);
  AddCoordinator(&app, &action);
  AddCerts(&app, &action);
  AddReport(&app, &action);
#endif

  AddHelpMarkdown(&app, &action);  // last: it walks every subcommand added above

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!action) return 2;
  sift::Status s = action();
  if (!s.ok()) {
    std::fflush(stdout);
    std::cerr << "sift: error: " << s.message() << "\n";
    return ExitCodeOf(s);  // 1 unless the command attached another (cli/exit_code.h)
  }
  return 0;
}
