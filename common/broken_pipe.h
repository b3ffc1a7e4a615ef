// IgnoreBrokenPipes: makes a write to a socket or pipe whose reader has gone away fail with EPIPE
// instead of killing the process with SIGPIPE (exit 141). Every long-running role calls it before
// it opens a connection (cli/stop_signals.h does, for the coordinator, the embedding server and
// the worker). gRPC sends with MSG_NOSIGNAL, but Gloo's TCP transport writes with plain writev():
// when one worker leaves a job (a stale generation after a coordinator restart, a kill -9), a peer
// that is writing its share of an allreduce to it would die of SIGPIPE rather than fail the
// collective with an error Status and rejoin. Process-wide and idempotent; the disposition is
// inherited by children (exec keeps an ignored signal ignored).
#pragma once

namespace sift {

void IgnoreBrokenPipes();

}  // namespace sift
