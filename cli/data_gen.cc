// Work in progress: registered by a later commit.
#include "cli/commands.h"

namespace sift::cli {
void AddDataGen(CLI::App* data, Action* action) { (void)data; (void)action; }
}  // namespace sift::cli
