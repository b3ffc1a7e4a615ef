// The subcommands of `sift`. Each Add* registers one subcommand (its flags and help) under
// `parent`; when the user selects it, its callback stores the work to do in *action, and main()
// runs that after parsing. Commands are thin: parse flags into an options struct, call a library.
#pragma once

#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "common/status.h"

namespace sift::cli {

using Action = std::function<Status()>;

void AddDataGen(CLI::App* data, Action* action);          // sift data gen
void AddDataAmazon(CLI::App* data, Action* action);       // sift data amazon
void AddDataEvents(CLI::App* data, Action* action);       // sift data events
void AddDataConvert(CLI::App* data, Action* action);      // sift data convert
void AddDataInspect(CLI::App* data, Action* action);      // sift data inspect
void AddBenchLoader(CLI::App* bench, Action* action);     // sift bench loader
void AddBenchKernels(CLI::App* bench, Action* action);    // sift bench kernels
void AddDevice(CLI::App* app, Action* action);            // sift device
void AddTrain(CLI::App* app, Action* action);             // sift train
void AddBenchTrain(CLI::App* bench, Action* action);      // sift bench train
void AddBenchInference(CLI::App* bench, Action* action);  // sift bench inference
void AddBenchPs(CLI::App* bench, Action* action);         // sift bench ps
void AddBenchCluster(CLI::App* bench, Action* action);    // sift bench cluster
void AddEmbeddingServer(CLI::App* app, Action* action);   // sift embedding-server
void AddHealth(CLI::App* app, Action* action);            // sift health
void AddSubmit(CLI::App* app, Action* action);            // sift submit
void AddStatus(CLI::App* app, Action* action);            // sift status
void AddJobs(CLI::App* app, Action* action);              // sift jobs
void AddCancel(CLI::App* app, Action* action);            // sift cancel
void AddLogs(CLI::App* app, Action* action);              // sift logs
void AddLocal(CLI::App* app, Action* action);             // sift local
void AddWorker(CLI::App* app, Action* action);            // sift worker
void AddCoordinator(CLI::App* app, Action* action);       // sift coordinator
void AddCerts(CLI::App* app, Action* action);             // sift certs
void AddReport(CLI::App* app, Action* action);            // sift report
void AddHelpMarkdown(CLI::App* app, Action* action);      // sift help-markdown (docs/reference/)

// The full command line, as typed (benchmarks print it).
const std::string& CommandLine();

}  // namespace sift::cli
