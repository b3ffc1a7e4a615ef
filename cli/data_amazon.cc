// Work in progress: registered by a later commit.
#include "cli/commands.h"

namespace sift::cli {
void AddDataAmazon(CLI::App* data, Action* action) { (void)data; (void)action; }
}  // namespace sift::cli
