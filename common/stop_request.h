// A process-wide "stop requested" flag: set by a role's signal handling (cli/stop_signals.h) when
// SIGINT/SIGTERM arrives while the role is still starting, read by start-up loops that may block
// for long (registering with a coordinator) so they give up at once. Lock-free atomic: safe to
// set from a signal handler and to read from any thread.
#pragma once

namespace sift {

void RequestStop();
bool StopRequested();

}  // namespace sift
